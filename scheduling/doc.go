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
// Where each rule of the contract (CONTRACT.md) lives:
//
//	2.1 the deployment's engines, members, pods per copy   compile.go
//	    DRA CEL selectors, compiled and evaluated          selector.go
//	3   placements, shortfall explanations (as data)       types.go, explain.go
//	4.1 this deployment's replicas (Ours)                  schedule.go
//	4.1 cluster readiness, gateway, taints, tolerations    cluster.go
//	4.1 matching members to pools                          match.go
//	4.1 retain, scale down, fill (fillScore)               schedule.go
//	4.1 one pool per engine, first pool that fits          place.go
//	4.2 whole-node accounting                              ledger.go, charge.go
//	4.3 free-device accounting, binding, gangs             ledger.go, place.go
//	4.3 the counted rule (Counted)                         counted.go
//	4.3 charging observed replicas, stamped requests       charge.go
//	4.4 invariants                                         property_test.go, fuzz_test.go
package scheduling
