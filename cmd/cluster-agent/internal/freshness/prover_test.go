package freshness

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
)

// kind is a fake source: the API server's newest resourceVersion of the
// kind, the informer's cache's, and the probes' watches.
type kind struct {
	mu      sync.Mutex
	newest  string
	cached  string
	listErr error
	watches chan *watch.FakeWatcher
	opened  []metav1.ListOptions
}

func newKind(newest, cached string) *kind {
	return &kind{newest: newest, cached: cached, watches: make(chan *watch.FakeWatcher, 16)}
}

func (k *kind) set(newest, cached string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.newest, k.cached = newest, cached
}

func (k *kind) LastStoreSyncResourceVersion() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cached
}

func (k *kind) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listErr != nil {
		return nil, k.listErr
	}
	return &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: k.newest}}, nil
}

func (k *kind) WatchWithContext(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
	k.mu.Lock()
	k.opened = append(k.opened, o)
	k.mu.Unlock()
	w := watch.NewFakeWithOptions(watch.FakeOptions{ChannelSize: 4})
	k.watches <- w
	return w, nil
}

// probe returns the next probe's watch, failing the test after a while.
func (k *kind) probe(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-k.watches:
		return w
	case <-time.After(5 * time.Second):
		t.Fatal("no probe watch opened")
		return nil
	}
}

func (k *kind) noProbe(t *testing.T) {
	t.Helper()
	select {
	case <-k.watches:
		t.Fatal("a probe watch opened; want none")
	case <-time.After(100 * time.Millisecond):
	}
}

func bookmark(rv string) runtime.Object {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
}

func newProver(clk *clocktesting.FakeClock, kinds ...*kind) *Prover {
	var sources []Source
	for i, k := range kinds {
		sources = append(sources, Source{Kind: string(rune('A' + i)), Store: k, ListWatch: k})
	}
	return New(sources, Options{Clock: clk, Log: logr.Discard()})
}

// eventually checks until the prover's proven time is want.
func eventually(t *testing.T, p *Prover, want time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.Check(t.Context())
		if got := p.Proven(); got.Equal(want) {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("proven %s, want %s", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProvenWhenCachesCatchUp(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a, b := newKind("10", "10"), newKind("20", "15")
	p := newProver(clk, a, b)
	p.Start(t.Context())
	if got := p.Proven(); !got.IsZero() {
		t.Fatalf("proven %s with B's cache behind (15 < 20); want nothing", got)
	}
	// The probe of B sees a change: nothing can be said.
	w := b.probe(t)
	w.Add(bookmark("16"))
	time.Sleep(50 * time.Millisecond)
	p.Check(t.Context())
	if got := p.Proven(); !got.IsZero() {
		t.Fatalf("proven %s after a probe saw a change; want nothing", got)
	}
	// The informer catches up past 20: T is proven.
	b.set("30", "21")
	eventually(t, p, t0)

	// A newer round, every cache already there.
	clk.Step(5 * time.Second)
	b.set("21", "21")
	p.Start(t.Context())
	if got := p.Proven(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("proven %s, want %s", got, t0.Add(5*time.Second))
	}
}

func TestProbeProvesAQuietKind(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	quiet := newKind("100", "42")
	p := newProver(clk, quiet)
	p.Start(t.Context())
	w := quiet.probe(t)
	if o := quiet.opened[0]; o.ResourceVersion != "42" || !o.AllowWatchBookmarks || o.TimeoutSeconds == nil {
		t.Fatalf("probe opened with %+v; want from the cache's resourceVersion 42, with bookmarks and a timeout", o)
	}
	// A bookmark before any event: no change in (42, 100].
	w.Action(watch.Bookmark, bookmark("100"))
	eventually(t, p, t0)
}

func TestProbeBookmarkTooOld(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	quiet := newKind("100", "42")
	p := newProver(clk, quiet)
	p.Start(t.Context())
	quiet.probe(t).Action(watch.Bookmark, bookmark("99"))
	time.Sleep(50 * time.Millisecond)
	p.Check(t.Context())
	if got := p.Proven(); !got.IsZero() {
		t.Fatalf("proven %s with a bookmark (99) short of the newest resourceVersion (100); want nothing", got)
	}
	// The next check probes again; this time the bookmark reaches it.
	quiet.probe(t).Action(watch.Bookmark, bookmark("100"))
	eventually(t, p, t0)
}

func TestNothingProvenWhileTheAPIServerIsGone(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	k := newKind("5", "5")
	p := newProver(clk, k)
	p.Start(t.Context())
	if !p.Proven().Equal(t0) {
		t.Fatalf("proven %s, want %s", p.Proven(), t0)
	}
	k.listErr = errors.New("connection refused")
	clk.Step(time.Minute)
	p.Start(t.Context())
	p.Check(t.Context())
	if !p.Proven().Equal(t0) {
		t.Errorf("proven %s while the API server cannot be read; want it to stay %s", p.Proven(), t0)
	}
	k.noProbe(t)
}

func TestProvenNeverGoesBack(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	k := newKind("10", "1")
	p := newProver(clk, k)
	// Three rounds pending: at t0 (rv 10), t0+5s (rv 20), t0+10s (rv 30).
	for _, rv := range []string{"10", "20", "30"} {
		k.set(rv, "1")
		p.Start(t.Context())
		clk.Step(5 * time.Second)
	}
	// The cache reaches 20: the round of t0+5s is proven, and t0's with it.
	k.set("30", "20")
	eventually(t, p, t0.Add(5*time.Second))
	p.mu.Lock()
	pending := len(p.pending)
	p.mu.Unlock()
	if pending != 1 {
		t.Errorf("%d rounds pending; want 1 (t0+10s)", pending)
	}
	k.set("30", "30")
	eventually(t, p, t0.Add(10*time.Second))
}

func TestStaleRoundsDropped(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	k := newKind("10", "1")
	p := newProver(clk, k)
	p.Start(t.Context())
	clk.Step(11 * time.Minute)
	p.Check(t.Context())
	k.set("10", "10")
	p.Check(t.Context())
	if got := p.Proven(); !got.IsZero() {
		t.Errorf("proven %s from a round older than MaxPending; want it dropped", got)
	}
}

func TestNoProbes(t *testing.T) {
	t0 := time.Date(2026, 10, 20, 20, 6, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	quiet := newKind("100", "42")
	p := New([]Source{{Kind: "A", Store: quiet, ListWatch: quiet}}, Options{Clock: clk, Log: logr.Discard(), NoProbes: true})
	p.Start(t.Context())
	quiet.noProbe(t)
	quiet.set("100", "100")
	eventually(t, p, t0)
}
