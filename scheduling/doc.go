// Package scheduling places a ModelDeployment's replicas on a fleet of
// InferenceClusters. It is pure: a Snapshot of observed state goes in, a Plan
// with its explanations as data comes out. It reads no clock, logs nothing
// and knows nothing of protobuf or the function SDK; the same snapshot in any
// order gives the same plan.
//
// A pool whose cluster agent report is usable is accounted by free devices
// (its histogram of nodes by free devices, plus the nodes it can still grow
// by); any other pool by whole nodes, as Modelplane v0.3 does.
//
// Where each rule of the specification lives, by its section of
// docs/spec.md:
//
//	#the-modeldeployment     engines, members, pods per copy       compile.go
//	#matching                DRA CEL selectors, compiled, evaluated selector.go
//	#matching                members to pools                       match.go
//	#why-a-replica-does-not-fit  placements, shortfalls as data     types.go, explain.go
//	#whose-replica           this deployment's replicas (Ours)     schedule.go
//	#eligible-clusters       readiness, gateway, taints            cluster.go
//	#retaining, #scaling-down, #filling                             schedule.go
//	#filling                 one pool per engine, first that fits   place.go
//	#whole-node-accounting                                          ledger.go, charge.go
//	#free-device-accounting, #assumed-binding, #gangs               ledger.go, place.go
//	#the-counted-rule        Counted                                counted.go
//	#re-placing              stuck replicas, moves                  replace.go
//	#invariants                                                     property_test.go, fuzz_test.go
package scheduling
