// Package freshness proves how recent the cluster agent's view of its
// cluster is: the time its reports publish as observedAt
// (docs/spec.md#computing-a-pool-report), as of which every object the
// reports are counted from is provably in the agent's caches.
//
// An informer's cache lags the API server by an unknown amount, and the
// time it last received an event says nothing about the events still on
// their way. So the Prover, every interval, takes the time T and then reads
// from the API server the newest resourceVersion X of each kind (a List of
// one object, a consistent read). Once every informer's cache holds
// everything up to its kind's X (client-go's
// Store.LastStoreSyncResourceVersion), the caches are complete as of T: any
// write before T has a resourceVersion at most X. T is then proven.
//
// A cache advances only with its kind's events and the watch bookmarks the
// API server sends about once a minute, so a quiet kind would hold a proof
// back that long. For a kind whose cache is behind X, the Prover opens a
// short watch of its own from the cache's resourceVersion R: the API server
// sends it, before the watch times out, a bookmark B. If no event came
// before B, the kind had no change in (R, B]: the cache, complete up to R,
// is complete up to B too.
//
// While the API server cannot be read, or a watch stalls with changes
// behind it, nothing is proven and the proven time stays where it was.
package freshness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Source is one kind whose cache a proof covers.
type Source struct {
	// Kind names the kind, for logs and metrics.
	Kind string
	// Store is the informer's cache.
	Store interface{ LastStoreSyncResourceVersion() string }
	// ListWatch lists and watches the kind on the API server.
	ListWatch cache.ListerWatcherWithContext
}

// Options tune a Prover.
type Options struct {
	// Interval is how often a proof starts.
	Interval time.Duration
	// ProbeTimeout is how long a probe's watch may run; the API server
	// sends its bookmark 2 seconds before that, so at least 3s.
	ProbeTimeout time.Duration
	// MaxPending is how long an unproven round is kept waiting for the
	// caches: a proof that takes longer is dropped, and a later one counts.
	MaxPending time.Duration
	// NoProbes leaves a cache behind its kind's newest resourceVersion to
	// catch up with its own events and bookmarks (about a minute apart).
	NoProbes bool
	// Clock is the clock; nil is the real one.
	Clock clock.WithTicker
	// Log logs proofs that fail.
	Log logr.Logger
	// Observe, if set, is told of each proof's outcome, for metrics.
	Observe func(Event)
}

// Event is something a Prover did.
type Event struct {
	// Kind is the kind concerned; empty for a whole round.
	Kind string
	// What happened: "round" (started), "round-error", "proven",
	// "probe-proven", "probe-changed", "probe-error".
	What string
	// Lag is, for "proven", how old the proven time was when proven.
	Lag time.Duration
}

// eventProbeError is the Event a probe that proved nothing reports.
const eventProbeError = "probe-error"

// Prover proves the time as of which the caches of its sources are
// complete.
type Prover struct {
	sources []Source
	opts    Options

	mu      sync.Mutex
	pending []round // oldest first
	proven  time.Time
	probes  []probe
	changed chan struct{}
}

// round is one proof: a time and each source's newest resourceVersion
// read after it.
type round struct {
	at  time.Time
	rvs []string
}

// probe is what a source's probes showed: the cache, complete up to the
// resourceVersion a probe started from, had no change to come up to
// proved, so it is complete up to proved too.
type probe struct {
	running bool
	proved  string
}

// New returns a Prover of the sources.
func New(sources []Source, opts Options) *Prover {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.ProbeTimeout < 3*time.Second {
		opts.ProbeTimeout = 3 * time.Second
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 10 * time.Minute
	}
	return &Prover{sources: sources, opts: opts, probes: make([]probe, len(sources)), changed: make(chan struct{}, 1)}
}

// Proven is the newest time proven so far, zero before the first. It never
// goes back.
func (p *Prover) Proven() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proven
}

// Changed receives a value after the proven time advances.
func (p *Prover) Changed() <-chan struct{} { return p.changed }

// Run starts a proof every interval and checks the caches against the
// pending ones, until ctx is done.
func (p *Prover) Run(ctx context.Context) {
	start := p.opts.Clock.NewTicker(p.opts.Interval)
	defer start.Stop()
	check := p.opts.Clock.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	p.Start(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-start.C():
			p.Start(ctx)
		case <-check.C():
			p.Check(ctx)
		}
	}
}

// Start starts a proof: it takes the time, then reads each source's
// newest resourceVersion. An error leaves no proof pending.
func (p *Prover) Start(ctx context.Context) {
	at := p.opts.Clock.Now()
	// A List that hangs (an API server going away) must not hold the
	// proofs after it.
	listCtx, cancel := context.WithTimeout(ctx, p.opts.Interval+10*time.Second)
	defer cancel()
	rvs := make([]string, len(p.sources))
	errs := make([]error, len(p.sources))
	var wg sync.WaitGroup
	for i, s := range p.sources {
		wg.Go(func() { rvs[i], errs[i] = newest(listCtx, s) })
	}
	wg.Wait()
	p.observe(Event{What: "round"})
	if err := errors.Join(errs...); err != nil {
		p.opts.Log.Info("Cannot read the API server's newest resourceVersions: the view's time stays where it is", "error", err.Error())
		p.observe(Event{What: "round-error"})
		return
	}
	p.mu.Lock()
	p.pending = append(p.pending, round{at: at, rvs: rvs})
	p.mu.Unlock()
	p.Check(ctx)
}

// newest reads the newest resourceVersion of a source's kind: the list's,
// of a consistent List (no resourceVersion) of one object.
func newest(ctx context.Context, s Source) (string, error) {
	obj, err := s.ListWatch.ListWithContext(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", fmt.Errorf("cannot list %s: %w", s.Kind, err)
	}
	l, err := meta.ListAccessor(obj)
	if err != nil {
		return "", fmt.Errorf("cannot read the list of %s: %w", s.Kind, err)
	}
	if l.GetResourceVersion() == "" {
		return "", fmt.Errorf("the list of %s has no resourceVersion", s.Kind)
	}
	return l.GetResourceVersion(), nil
}

// Check proves the newest pending proof that the caches now satisfy, and
// probes each source still behind the newest.
func (p *Prover) Check(ctx context.Context) {
	now := p.opts.Clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		return
	}
	have := make([]string, len(p.sources))
	for i, s := range p.sources {
		have[i] = s.Store.LastStoreSyncResourceVersion()
		if pr := p.probes[i].proved; atLeast(pr, have[i]) {
			have[i] = pr
		}
	}
	for i, r := range slices.Backward(p.pending) {
		if behind(have, r.rvs) != nil {
			continue
		}
		if r.at.After(p.proven) {
			p.proven = r.at
			p.observe(Event{What: "proven", Lag: now.Sub(r.at)})
			select {
			case p.changed <- struct{}{}:
			default:
			}
		}
		p.pending = p.pending[i+1:]
		break
	}
	for len(p.pending) > 0 && now.Sub(p.pending[0].at) > p.opts.MaxPending {
		p.pending = p.pending[1:]
	}
	if len(p.pending) == 0 || p.opts.NoProbes {
		return
	}
	for _, i := range behind(have, p.pending[len(p.pending)-1].rvs) {
		if p.probes[i].running || have[i] == "" {
			continue
		}
		p.probes[i].running = true
		go p.probe(ctx, i, have[i])
	}
}

// behind returns the sources whose caches have not reached the
// resourceVersions.
func behind(have, want []string) []int {
	var out []int
	for i := range want {
		if !atLeast(have[i], want[i]) {
			out = append(out, i)
		}
	}
	return out
}

// atLeast is whether resourceVersion a is at least b; false when either is
// not a resourceVersion (the cache has none yet).
func atLeast(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c >= 0
}

// probe watches source i from resourceVersion from, up to which its cache
// is complete, until the API server's bookmark: if no event came first,
// the cache is complete up to the bookmark.
func (p *Prover) probe(ctx context.Context, i int, from string) {
	s := p.sources[i]
	proved := ""
	defer func() {
		p.mu.Lock()
		p.probes[i].running = false
		if atLeast(proved, p.probes[i].proved) || p.probes[i].proved == "" && proved != "" {
			p.probes[i].proved = proved
		}
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, p.opts.ProbeTimeout+2*time.Second)
	defer cancel()
	timeout := int64(p.opts.ProbeTimeout / time.Second)
	w, err := s.ListWatch.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: from, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		p.observe(Event{Kind: s.Kind, What: eventProbeError})
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			p.observe(Event{Kind: s.Kind, What: eventProbeError})
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				p.observe(Event{Kind: s.Kind, What: eventProbeError})
				return
			}
			switch ev.Type {
			case watch.Bookmark:
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					p.observe(Event{Kind: s.Kind, What: eventProbeError})
					return
				}
				proved = m.GetResourceVersion()
				p.observe(Event{Kind: s.Kind, What: "probe-proven"})
				return
			case watch.Error:
				p.observe(Event{Kind: s.Kind, What: eventProbeError})
				return
			case watch.Added, watch.Modified, watch.Deleted:
				// A change after from: the informer has it to come, and
				// nothing can be said of the kind until it does.
				p.observe(Event{Kind: s.Kind, What: "probe-changed"})
				return
			}
		}
	}
}

func (p *Prover) observe(e Event) {
	p.opts.Log.V(2).Info("Freshness", "kind", e.Kind, "step", e.What, "lag", e.Lag.String())
	if p.opts.Observe != nil {
		p.opts.Observe(e)
	}
}
