package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/response"

	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
)

// contextAskedWhole is the key of the pipeline context by which a call's
// iteration tells its next ones that it asked for the whole fleet, so that
// they stay whole (docs/spec.md#narrow-requests).
const contextAskedWhole = "scheduler.fn.modelplane.ai/asked-whole-fleet"

// Function places a ModelDeployment's replicas on a fleet of GPU clusters.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
	now func() time.Time

	// fleet reads the fleet, keeping what the last calls read of it; nil
	// reads every object anew.
	fleet *fleet.Reader
	// planner keeps the deployments' compiled selectors and this server's
	// assumed placements across calls; the zero Planner keeps neither.
	planner plan.Planner
	// narrowing is what lets a call read less than the whole fleet; nil
	// always reads it whole.
	narrowing *fleet.Narrowing
	// tel logs and counts each call; nil does neither.
	tel *telemetry
}

// RunFunction reads the XR and the fleet, plans, and writes the replicas,
// endpoints, status and conditions. Bad input is a Fatal result, never an
// error: Crossplane then keeps everything as it was. A request the request
// codec decoded is used up once its server has returned: its fleet is gone.
//
// A call whose caller has gone (cancelled, or past its deadline) stops at
// the next phase and returns the context's error: nobody reads its answer.
func (f *Function) RunFunction(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	start := time.Now()
	s := summary{req: req}
	rsp := response.To(req, response.DefaultTTL)
	ensureDesired(rsp)
	err := f.run(ctx, req, rsp, &s)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		f.tel.called(&s, nil, err, time.Since(start), f.clock())
		return nil, err
	}
	if err != nil {
		response.Fatal(rsp, err)
	}
	f.tel.called(&s, rsp, err, time.Since(start), f.clock())
	return rsp, nil
}

// run is a call's steps: read the input and the XR, ask for the fleet
// and, once Crossplane has fetched it, read it, plan, and write the
// composed resources and the conditions. It notes in s what it did, for
// the call's log line and metrics.
func (f *Function) run(ctx context.Context, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, s *summary) error {
	settings, xr, err := readRequest(req)
	if err != nil {
		return err
	}
	f.logger().Debug("Running function", "xr", xr.Metadata.Namespace+"/"+xr.Metadata.Name, "tag", req.GetMeta().GetTag())
	now := f.clock()
	s.xr, s.now, s.maxAge = xr, now, settings.ObservationMaxAge
	askedWhole := req.GetContext().GetFields()[contextAskedWhole].GetBoolValue()
	asked, err := fleet.Require(f.fleet, f.narrowing, fleet.Iteration{Deployment: xr, Carried: carried{req}, AskedWhole: askedWhole, Now: now, MaxAge: settings.ObservationMaxAge})
	rsp.Requirements = requirements(asked.Selectors)
	if asked.Whole() {
		// The call's next iterations stay whole: Crossplane passes the
		// context on to them, and not to the deployment's next call.
		response.SetContextKey(rsp, contextAskedWhole, structpb.NewBoolValue(true))
	}
	if err != nil || !asked.Resolved {
		// Not resolved yet: Crossplane calls again once it has fetched it.
		return err
	}
	fl, err := asked.Read()
	if err != nil {
		return err
	}
	outcome, err := f.plan(ctx, plan.Call{Deployment: xr, Settings: settings, CacheUnresolved: asked.Cache.Unresolved(), Clusters: fl.Clusters, Replicas: fl.Replicas, Now: now, Shown: fl})
	if err != nil {
		return err
	}
	s.planned, s.outcome, s.fleet, s.observed = true, outcome, fl, req.GetObserved().GetResources()
	if err := gone(ctx, "compose replicas"); err != nil {
		return err
	}
	return write(rsp, call{xr: xr, cache: asked.Cache, fleet: fl, now: now, observed: req.GetObserved().GetResources(), outcome: outcome})
}

// plan plans a call whose fleet is read, unless its caller has gone.
func (f *Function) plan(ctx context.Context, c plan.Call) (plan.Outcome, error) {
	if err := gone(ctx, "answer the call"); err != nil {
		return plan.Outcome{}, err
	}
	c.Capacity, c.CompareWholeNode = f.tel.capacity(), f.tel.comparesWholeNode()
	return f.planner.Plan(ctx, c)
}

// gone is the context's error once the caller has gone, so that the phase
// about to start is skipped.
func gone(ctx context.Context, phase string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cannot %s: the caller has gone: %w", phase, err)
	}
	return nil
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
