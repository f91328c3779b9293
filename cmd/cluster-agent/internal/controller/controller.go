// Package controller is the cluster agent's control loop: it writes the
// status of every PoolObservation (the pool's report,
// docs/spec.md#poolobservation) and of every ReplicaObservation (how many
// of the replica's pods are bound, docs/spec.md#replicaobservation), as
// the objects they are counted from change.
package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Loop runs a reconcile after each change, debounced, and every period.
type Loop struct {
	// Debounce is how long after a change the reconcile runs: changes in
	// between join it.
	Debounce time.Duration
	// Period is the longest time between two reconciles.
	Period time.Duration
	// Periodic, if set, is called before each reconcile the period starts.
	Periodic func()
	// Clock is the clock; nil is the real one.
	Clock clock.WithTicker

	wake chan struct{}
	once sync.Once
}

func (l *Loop) init() {
	l.once.Do(func() {
		l.wake = make(chan struct{}, 1)
		if l.Clock == nil {
			l.Clock = clock.RealClock{}
		}
	})
}

// Wake asks for a reconcile, after the debounce.
func (l *Loop) Wake() {
	l.init()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run calls reconcile once now, then after each Wake (debounced), each
// value from also, and every period, until ctx is done.
func (l *Loop) Run(ctx context.Context, also <-chan struct{}, reconcile func(context.Context)) {
	l.init()
	period := l.Clock.NewTicker(l.Period)
	defer period.Stop()
	reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			select {
			case <-ctx.Done():
				return
			case <-l.Clock.After(l.Debounce):
			}
		case <-also:
		case <-period.C():
			if l.Periodic != nil {
				l.Periodic()
			}
		}
		reconcile(ctx)
	}
}

// Keys is a set of keys to reconcile, filled from informers' goroutines.
type Keys struct {
	mu   sync.Mutex
	keys map[string]bool
}

// Add adds keys.
func (k *Keys) Add(keys ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[string]bool{}
	}
	for _, key := range keys {
		k.keys[key] = true
	}
}

// Take empties the set and returns its keys, sorted.
func (k *Keys) Take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.keys))
	for key := range k.keys {
		out = append(out, key)
	}
	k.keys = nil
	slices.Sort(out)
	return out
}
