package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/assume"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/compose"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/observation"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// Names of the required resources; a Composition's render fixtures use them.
const (
	requiredClusters = "clusters"
	requiredReplicas = "all-replicas"
	requiredCache    = "cache"
)

// Function places a ModelDeployment's replicas on a fleet of GPU clusters.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
	now func() time.Time

	// fleet reads the fleet, keeping what the last calls read of it; nil
	// reads every object anew.
	fleet *fleet.Reader
	// selectors keeps the deployments' compiled CEL selectors across calls;
	// nil compiles them on every call.
	selectors *scheduling.Selectors
	// assumed are the replicas this server composed recently that the
	// fleet does not show yet; nil assumes none.
	assumed *assume.Ledger
}

// RunFunction reads the XR and the fleet, schedules, and writes the replicas,
// endpoints, status and conditions. Bad input is a Fatal result, never an
// error: Crossplane then keeps everything as it was. A request the request
// codec decoded is used up once its server has returned: its fleet is gone.
//
// A call whose caller has gone (cancelled, or past its deadline) stops at
// the next phase and returns the context's error: nobody reads its answer.
func (f *Function) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	rsp := response.To(req, response.DefaultTTL)
	ensureDesired(rsp)
	if err := f.run(ctx, req, rsp); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		response.Fatal(rsp, err)
	}
	return rsp, nil
}

// gone is the context's error once the caller has gone, so that the phase
// about to start is skipped. The scheduler itself is pure and takes no
// context: DRA's CEL cost limit bounds every evaluation, and a pass is
// milliseconds.
func gone(ctx context.Context, phase string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cannot %s: the caller has gone: %w", phase, err)
	}
	return nil
}

// run reads the input and the XR, asks for the fleet, and once Crossplane
// has fetched it, schedules and composes.
func (f *Function) run(ctx context.Context, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) error {
	opts, err := readInput(req)
	if err != nil {
		return err
	}
	xr, err := readXR(req)
	if err != nil {
		return err
	}
	f.logger().Debug("Running function", "xr", xr.Metadata.Namespace+"/"+xr.Metadata.Name, "tag", req.GetMeta().GetTag())
	required, resolved, err := requireFleet(req, rsp, xr)
	if err != nil || !resolved {
		// Not resolved yet: Crossplane calls again once it has fetched it.
		return err
	}
	now := f.clock()
	fl, err := f.fleet.Read(codec.ItemsOf(required.clusters), codec.ItemsOf(required.replicas), xr, now, opts.maxAge)
	if err != nil {
		return err
	}
	if err := gone(ctx, "answer the call"); err != nil {
		return err
	}
	return f.compose(ctx, req, rsp, xr, required.cache, fl, opts, now)
}

// ensureDesired makes sure the response has a desired state to write into,
// whatever the request carried.
func ensureDesired(rsp *fnv1.RunFunctionResponse) {
	if rsp.GetDesired() == nil {
		rsp.Desired = &fnv1.State{}
	}
	if rsp.GetDesired().GetComposite() == nil {
		rsp.Desired.Composite = &fnv1.Resource{}
	}
	if rsp.GetDesired().GetComposite().GetResource() == nil {
		rsp.Desired.Composite.Resource = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	if rsp.Desired.Composite.Resource.Fields == nil {
		rsp.Desired.Composite.Resource.Fields = map[string]*structpb.Value{}
	}
	if rsp.Desired.Resources == nil {
		rsp.Desired.Resources = map[string]*fnv1.Resource{}
	}
}

func (f *Function) logger() logging.Logger {
	if f.log == nil {
		return logging.NewNopLogger()
	}
	return f.log
}

func (f *Function) clock() time.Time {
	if f.now == nil {
		return time.Now()
	}
	return f.now()
}

// compose schedules and writes everything the response carries.
func (f *Function) compose(ctx context.Context, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, cache modelCache, fl *fleet.Fleet, opts options, now time.Time) error {
	warn(rsp, fl.Warnings)
	setCacheCondition(rsp, cache)
	if len(fl.Clusters) == 0 {
		// Nothing to schedule on; what did not read stays as observed.
		composed, err := writeComposed(rsp, xr, &scheduling.Plan{Replicas: scheduling.AsObserved(xr, fl.Replicas)}, req.GetObserved().GetResources())
		if err != nil {
			return err
		}
		response.ConditionFalse(rsp, condReplicasScheduled, reasonNoClusters)
		setReadyCondition(rsp, len(composed), countReady(composed))
		setCapacityObserved(rsp, fl)
		response.Warning(rsp, errors.New("No InferenceClusters found")) //nolint:staticcheck // Modelplane v0.3's warning, word for word.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
		return nil
	}
	warnObservations(rsp, fl.Pools, fl.Findings)

	if err := gone(ctx, "schedule replicas"); err != nil {
		return err
	}
	plan, err := f.schedule(ctx, scheduling.Snapshot{
		Deployment: xr,
		Clusters:   fl.Clusters,
		Replicas:   fl.Replicas,
		// An unresolved cache keeps what exists and places nothing new.
		Options: scheduling.Options{
			Binding: opts.binding, RetainOnly: cache.unresolved(), Selectors: f.selectors,
			ReplaceUnscheduledAfter: opts.replaceAfter,
		},
		Now: now,
	}, fl)
	if invalid, ok := errors.AsType[*scheduling.InvalidSelectorError](err); ok {
		err := keepObserved(req, rsp, invalid)
		setCapacityObserved(rsp, fl)
		return err
	}
	if err != nil {
		return fmt.Errorf("cannot schedule replicas: %w", err)
	}

	if err := gone(ctx, "compose replicas"); err != nil {
		return err
	}
	observed := req.GetObserved().GetResources()
	composed, err := writeComposed(rsp, xr, plan, observed)
	if err != nil {
		return err
	}
	warnMoves(rsp, xr, plan.Moves)
	setPlanConditions(rsp, plan, composed, len(fl.Clusters))
	setCapacityObserved(rsp, fl)
	setTTL(rsp, fl.Pools, now)
	return nil
}

// composedReplica is what a response composes of one placed replica.
type composedReplica struct {
	cluster string
	// observed is whether the replica was composed before, and is observed.
	observed, ready bool
}

// writeComposed writes a ModelReplica per placement, a ModelEndpoint per
// placement that is Ready on a cluster with a gateway, and the XR's status.
// A placement kept as observed is written as observed.
func writeComposed(rsp *fnv1.RunFunctionResponse, xr *v1alpha1.ModelDeployment, plan *scheduling.Plan, observed map[string]*fnv1.Resource) ([]composedReplica, error) {
	var composed []composedReplica
	enc := compose.NewEncoder()
	budget := responseBudget{left: maxResponseBytes}
	for _, p := range plan.Replicas {
		if p.AsObserved {
			c, ok, err := keepAsObserved(rsp, p, observed, &budget)
			if err != nil {
				return nil, err
			}
			if ok {
				composed = append(composed, c)
			}
			continue
		}
		s, err := enc.Replica(compose.Replica(xr, p))
		if err != nil {
			return nil, err
		}
		r := &fnv1.Resource{Resource: s}
		if err := budget.spend(rsp, compose.ReplicaKey(p), r); err != nil {
			return nil, err
		}
		obs, wasObserved := observed[compose.ReplicaKey(p)]
		c := composedReplica{cluster: p.Cluster, observed: wasObserved, ready: isReady(obs)}
		if c.ready {
			r.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[compose.ReplicaKey(p)] = r
		composed = append(composed, c)
		if p.Gateway == "" || !c.ready {
			continue
		}
		s, err = compose.Encode(compose.Endpoint(xr, p))
		if err != nil {
			return nil, err
		}
		e := &fnv1.Resource{Resource: s}
		if err := budget.spend(rsp, compose.EndpointKey(p), e); err != nil {
			return nil, err
		}
		if isReady(observed[compose.EndpointKey(p)]) {
			e.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[compose.EndpointKey(p)] = e
	}
	if err := writeStatus(rsp, len(composed), countReady(composed)); err != nil {
		return nil, err
	}
	if len(composed) == 0 {
		// An XR with nothing composed would otherwise read as ready.
		rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	}
	return composed, nil
}

// countReady is how many of the composed replicas are Ready.
func countReady(composed []composedReplica) int {
	n := 0
	for _, c := range composed {
		if c.ready {
			n++
		}
	}
	return n
}

// keepAsObserved writes a replica kept as observed, and its endpoint if it
// has one, exactly as they are observed, counting them against the
// response's budget as composed ones are. A replica this XR does not
// compose (none is observed of it) is not this XR's to keep: false.
func keepAsObserved(rsp *fnv1.RunFunctionResponse, p scheduling.Placement, observed map[string]*fnv1.Resource, budget *responseBudget) (composedReplica, bool, error) {
	key, obs := observedReplica(p, observed)
	if obs == nil {
		return composedReplica{}, false, nil
	}
	keep := func(key string, obs *fnv1.Resource) error {
		desired := &fnv1.Resource{Resource: compose.DesiredFromObserved(obs.GetResource())}
		if isReady(obs) {
			desired.Ready = fnv1.Ready_READY_TRUE
		}
		if err := budget.spend(rsp, key, desired); err != nil {
			return err
		}
		rsp.Desired.Resources[key] = desired
		return nil
	}
	if err := keep(key, obs); err != nil {
		return composedReplica{}, false, err
	}
	if endpoint, ok := observed[compose.EndpointKeyOf(key)]; ok {
		if err := keep(compose.EndpointKeyOf(key), endpoint); err != nil {
			return composedReplica{}, false, err
		}
	}
	return composedReplica{cluster: p.Cluster, observed: true, ready: isReady(obs)}, true, nil
}

// observedReplica is the observed composed ModelReplica of a placement kept
// as observed: under its key, or, when its identity did not read, the one
// of its name.
func observedReplica(p scheduling.Placement, observed map[string]*fnv1.Resource) (string, *fnv1.Resource) {
	name := func(r *fnv1.Resource) string {
		return r.GetResource().GetFields()["metadata"].GetStructValue().GetFields()["name"].GetStringValue()
	}
	if key := compose.ReplicaKey(p); p.Cluster != "" && name(observed[key]) == p.Name {
		return key, observed[key]
	}
	keys := make([]string, 0, len(observed))
	for k := range observed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if compose.IsReplicaKey(k) && name(observed[k]) == p.Name {
			return k, observed[k]
		}
	}
	return "", nil
}

// keepObserved answers a nodeSelector that does not compile: nothing new is
// placed and nothing moves, so every replica and endpoint stays desired as
// observed, and the condition names the engine, member and request.
func keepObserved(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, invalid *scheduling.InvalidSelectorError) error {
	msg := "Invalid nodeSelector CEL expression: " + invalid.Error()
	response.ConditionFalse(rsp, condReplicasScheduled, reasonInvalidNodeSelector).WithMessage(msg)
	response.Warning(rsp, errors.New(msg))
	rsp.Desired.Composite.Ready = fnv1.Ready_READY_FALSE
	keys := make([]string, 0, len(req.GetObserved().GetResources()))
	for k := range req.GetObserved().GetResources() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	total, ready := 0, 0
	for _, k := range keys {
		if !compose.IsComposedKey(k) {
			continue
		}
		observed := req.GetObserved().GetResources()[k]
		desired := &fnv1.Resource{Resource: compose.DesiredFromObserved(observed.GetResource())}
		if isReady(observed) {
			desired.Ready = fnv1.Ready_READY_TRUE
		}
		rsp.Desired.Resources[k] = desired
		if compose.IsReplicaKey(k) {
			total++
			if isReady(observed) {
				ready++
			}
		}
	}
	setReadyCondition(rsp, total, ready)
	return writeStatus(rsp, total, ready)
}

// writeStatus writes the XR's status.replicas.
func writeStatus(rsp *fnv1.RunFunctionResponse, total, ready int) error {
	s, err := structpb.NewValue(map[string]any{"replicas": map[string]any{"total": total, "ready": ready}})
	if err != nil {
		return fmt.Errorf("cannot write the ModelDeployment status: %w", err)
	}
	rsp.Desired.Composite.Resource.Fields["status"] = s
	return nil
}

// isReady reads an observed composed resource's Ready condition.
func isReady(r *fnv1.Resource) bool { return compose.IsReady(r.GetResource()) }

// setTTL asks to be called again no later than when the freshest-but-expiring
// usable observation goes stale, so a silent agent is noticed.
func setTTL(rsp *fnv1.RunFunctionResponse, pools []observation.PoolReport, now time.Time) {
	ttl := response.DefaultTTL
	for _, p := range pools {
		if p.State == observation.Usable {
			ttl = min(ttl, max(p.ExpiresAt.Sub(now), time.Second))
		}
	}
	rsp.Meta.Ttl = durationpb.New(ttl)
}
