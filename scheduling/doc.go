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
//	#whose-replica           this deployment's replicas (Ours)     pass.go
//	#eligible-clusters       readiness, gateway, taints            cluster.go
//	#retaining, #scaling-down, #filling                             schedule.go
//	#filling                 one pool per engine, first that fits   pass.go
//	#whole-node-accounting   charging what holds a pool             ledger.go, pass.go
//	#free-device-accounting, #assumed-binding, #gangs               ledger.go, place.go
//	#assumed-binding         best fit on a steered pool (bindingOf)  pass.go
//	#charge-order            the order pods take nodes              schedule.go, pass.go, place.go
//	#the-counted-rule        Counted                                counted.go
//	#re-placing              stuck replicas, moves                  schedule.go
//	#re-placing              what a replica remembers (Replacement) types.go
//	#invariants                                                     property_test.go, fuzz_test.go
//
// The files read one way: each uses only files after it in this list, from
// Schedule down to the leaves.
//
//	schedule.go  Schedule and the steps of a pass: retain, scale down, re-place, fill
//	pass.go      the pass's state and its ledger: charge, reserve, what is left
//	place.go     an engine's pods reserved on one pool, in gangs
//	match.go     members matched to pools
//	ledger.go    one pool's nodes grouped by free devices
//	cluster.go   a candidate cluster and its pools; eligibility
//	compile.go   the deployment's engines, selectors compiled
//	counted.go   the counted rule
//	types.go     what a pass reads and returns
//	explain.go   why a cluster cannot host a replica, as data and as text
//	selector.go  DRA CEL selectors and devices; count bounds
package scheduling
