package live

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modelplaneai/fleet-scheduler/test/live/internal/harness"
)

// envNarrowScale lists the fleet sizes TestNarrowCostsOnALiveControlPlane
// measures at, e.g. "2000,10000"; unset, it does not run: it is a
// measurement (docs/performance.md), not a check CI needs.
const envNarrowScale = "LIVE_NARROW_SCALE"

// TestNarrowCostsOnALiveControlPlane measures what one ModelDeployment's
// reconcile costs Crossplane core, reading the whole fleet and reading it
// narrowly, side by side on one control plane: its CPU seconds, and the
// bytes it sends the function. The fleet's other ModelReplicas are paused
// (crossplane.io/paused), so only the deployment under test reconciles;
// 1 in 200 of them is not counted by its pool's report.
//
//	LIVE_NARROW_SCALE=2000,10000 ./hack/test-live.sh -run TestNarrowCosts
func TestNarrowCostsOnALiveControlPlane(t *testing.T) {
	scales := os.Getenv(envNarrowScale)
	if scales == "" || testing.Short() {
		t.Skip("SKIP: a measurement: set " + envNarrowScale + " to the fleet sizes, e.g. 2000,10000")
	}
	cp := startControlPlane(t)
	xrds := filepath.Join(cp.root, "test", "schemas", "xrds")
	cp.installXRDs(t,
		filepath.Join(xrds, "modeldeployments.yaml"),
		filepath.Join(xrds, "modelreplicas.yaml"),
		filepath.Join(xrds, "modelcaches.yaml"),
		filepath.Join(cp.root, "deploy", "inferenceclusters.yaml"),
		filepath.Join("testdata", "modelendpoints.yaml"),
	)
	cp.applyAll(t, harness.ReadObjects(t, filepath.Join(cp.root, "example", "composition.yaml")))
	for _, ns := range []string{namespace, "search", "research", "team"} {
		cp.apply(t, harness.Object("v1", "Namespace", "", ns))
	}
	fl := readFleet(t, cp.root)
	cp.applyAll(t, asOf(t, fl.clusters, time.Now()))
	xr := harness.ReadObjects(t, filepath.Join(cp.root, "example", "xr.yaml"))[0]
	cp.apply(t, xr)
	cp.waitXR(t, converge, xrWant{total: 4})

	var rows []string
	created := 0
	for s := range strings.SplitSeq(scales, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= created {
			t.Fatalf("%s=%q: want increasing fleet sizes", envNarrowScale, scales)
		}
		cp.createPausedReplicas(t, created, n)
		created = n
		// Narrow first: a Go process seldom gives memory back soon, so the
		// full reads' peak would otherwise stand in for the narrow ones'.
		narrow := cp.measureReconciles(t, "", 10)
		full := cp.measureReconciles(t, "--no-narrow-requests", 10)
		if !narrow.narrow {
			t.Fatalf("at %d replicas the measured calls did not go narrow", n)
		}
		row := fmt.Sprintf("| %d | %.3f | %.3f | %.2f | %d | %d | %.2f | %d | %d | %.3f |", n,
			full.cpu, narrow.cpu, narrow.cpu/full.cpu,
			full.peakRSS>>20, narrow.peakRSS>>20, float64(narrow.peakRSS)/float64(full.peakRSS),
			full.bytes, narrow.bytes, float64(narrow.bytes)/float64(full.bytes))
		t.Log(row)
		rows = append(rows, row)
	}
	t.Logf("\n| replicas | Crossplane CPU s per reconcile, full | narrow | ratio | Crossplane peak RSS MiB, full | narrow | ratio | bytes per reconcile, full | narrow | ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n%s", strings.Join(rows, "\n"))
}

// createPausedReplicas creates the replicas of indexes [from, to) of other
// deployments on the example's clusters, paused, labelled as the function
// labels them, their pods scheduled hours before the reports: 1 in 200 just
// after them, not counted.
func (cp *controlPlane) createPausedReplicas(t *testing.T, from, to int) {
	t.Helper()
	started := time.Now()
	template := fl0Template(t, cp)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				r, status := pausedReplica(template, i)
				cp.apply(t, r)
				cp.applyStatus(t, r, status)
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("created %d paused ModelReplicas in %s", to-from, time.Since(started).Round(time.Second))
}

// fl0Template is the spec of the example fleet's first other replica, whose
// pod template is realistic: the replicas created copy it.
func fl0Template(t *testing.T, cp *controlPlane) map[string]any {
	t.Helper()
	fl := readFleet(t, cp.root)
	spec, _, _ := unstructured.NestedMap(fl.replicas[0].Object, "spec")
	return spec
}

// pausedReplica is the i-th replica created: on eks-us-east's l4 pool, as
// embed-bge-m3's are, in namespace team, of deployment other-<i/10>.
func pausedReplica(spec map[string]any, i int) (*unstructured.Unstructured, map[string]any) {
	name := fmt.Sprintf("other-%05d-%05d", i/10, i)
	r := harness.Object(apiVersion, "ModelReplica", "team", name)
	r.SetAnnotations(map[string]string{"crossplane.io/paused": "true"})
	counted := i%200 != 199
	r.SetLabels(map[string]string{
		"modelplane.ai/deployment": fmt.Sprintf("other-%05d", i/10), "modelplane.ai/cluster": "eks-us-east",
		"modelplane.ai/replica-index": strconv.Itoa(i % 10), labelCounted: strconv.FormatBool(counted),
	})
	r.Object["spec"] = spec
	at := time.Now().Add(-time.Duration(1+i%24) * time.Hour)
	if !counted {
		at = time.Now().Add(time.Minute)
	}
	status := map[string]any{"conditions": []any{
		map[string]any{"type": "PodsScheduled", "status": "True", "reason": "Reported", "lastTransitionTime": at.UTC().Format(time.RFC3339)},
	}}
	return r, status
}

// reconcileCost is what a run of reconciles cost, per reconcile.
type reconcileCost struct {
	cpu     float64 // Crossplane core's CPU seconds
	rss     int64   // Crossplane core's resident memory before the reconciles
	peakRSS int64   // the most it held during them
	bytes   int     // bytes of the requests Crossplane sent the function
	narrow  bool    // whether the measured calls read narrowly
}

// measureReconciles restarts the function with a flag (none for its
// defaults), lets its first calls read the fleet, then pokes the XR k
// times, one reconcile after another, and measures them. Crossplane does
// other work meanwhile (the paused replicas' own reconciles, which return
// at once, its watches): its CPU over as long a window without a poke is
// taken off.
func (cp *controlPlane) measureReconciles(t *testing.T, flag string, k int) reconcileCost {
	t.Helper()
	cp.stopFunction(t)
	args := cp.functionArgs
	if flag != "" {
		args = append(slices.Clone(args), flag)
	}
	cp.function = harness.StartProcess(t, cp.logs, "function", cp.functionBin, nil, args...)
	cp.function.WaitListening(t, cp.functionAddr, 30*time.Second)
	poke := cp.poker(t)
	// Two reconciles to warm up: the server's first reads the fleet whole
	// and finds it labelled, its caches fill.
	cp.reconciles(t, poke, 2)
	fresh := asOf(t, readFleet(t, cp.root).clusters, time.Now())
	cp.applyAll(t, fresh)
	cp.reconciles(t, poke, 1)
	// Crossplane v2.4 watches the ModelReplicas it is asked for, and works
	// through thousands just created for minutes: wait until it idles, so
	// that the window after the reconciles measures its idle cost.
	cp.waitQuiet(t)
	before, start := cp.crossplaneUsage(t), time.Now()
	peak := cp.peakRSS(t)
	calls := cp.reconciles(t, poke, k)
	most, after, took := peak(), cp.crossplaneUsage(t), time.Since(start)
	time.Sleep(took)
	idle := cp.crossplaneUsage(t).CPU - after.CPU
	cpu := after.CPU - before.CPU
	t.Logf("%s: Crossplane used %.2fs of CPU in %s of %d reconciles, and %.2fs in as long without; its RSS went from %d to %d MiB at most", flag, cpu, took.Round(time.Second), k, idle, before.RSS>>20, most>>20)
	if idle >= cpu {
		t.Errorf("%s: Crossplane used more CPU in the window without a reconcile (%.2fs) than with %d (%.2fs): it was busy with something else, and this is no measurement", flag, idle, k, cpu)
	}
	out := reconcileCost{cpu: (cpu - idle) / float64(k), rss: before.RSS, peakRSS: most, narrow: true}
	for _, c := range calls {
		out.bytes += c.bytes
		if slices.Contains(c.required, "all-replicas") {
			out.narrow = false
		}
	}
	out.bytes /= k
	return out
}

// reconciles pokes the XR and waits for its reconcile, k times: a
// reconcile is done once the recorder has seen a call carrying the fleet
// and no call for two seconds. It returns the calls that carried it.
func (cp *controlPlane) reconciles(t *testing.T, poke func(), k int) []recordedCall {
	t.Helper()
	var fleetCalls []recordedCall
	for range k {
		start := time.Now()
		time.Sleep(5 * time.Second) // poke waits five seconds between pokes
		poke()
		eventually(t, 2*converge, "a reconcile", func() error {
			calls := cp.recorder.since(start)
			if len(calls) == 0 || time.Since(calls[len(calls)-1].at) < 2*time.Second {
				return fmt.Errorf("%d calls so far", len(calls))
			}
			for _, c := range slices.Backward(calls) {
				if slices.Contains(c.required, "clusters") && len(c.required) > 1 {
					fleetCalls = append(fleetCalls, c)
					return nil
				}
			}
			return fmt.Errorf("no call carried the fleet: %v", carried(calls))
		})
	}
	return fleetCalls
}

// crossplaneUsage is what Crossplane core has used so far.
func (cp *controlPlane) crossplaneUsage(t *testing.T) harness.Usage {
	t.Helper()
	u, err := cp.crossplane.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// waitQuiet waits until Crossplane core uses under 5% of a core over 10
// seconds, for at most 15 minutes, and says how long it took.
func (cp *controlPlane) waitQuiet(t *testing.T) {
	t.Helper()
	const window, busy = 10 * time.Second, 0.05
	start := time.Now()
	for {
		before := cp.crossplaneUsage(t)
		time.Sleep(window)
		used := cp.crossplaneUsage(t).CPU - before.CPU
		if used < busy*window.Seconds() {
			t.Logf("Crossplane idle (%.2fs of CPU in %s) after %s", used, window, time.Since(start).Round(time.Second))
			return
		}
		if time.Since(start) > 15*time.Minute {
			t.Fatalf("Crossplane still used %.2fs of CPU in %s after 15 minutes of waiting for it to idle", used, window)
		}
	}
}

// peakRSS samples Crossplane core's resident memory every 50 ms until
// stopped, and gives the most it saw.
func (cp *controlPlane) peakRSS(t *testing.T) (stop func() int64) {
	t.Helper()
	done, peak := make(chan struct{}), make(chan int64, 1)
	go func() {
		var most int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if u, err := cp.crossplane.Usage(); err == nil {
				most = max(most, u.RSS)
			}
			select {
			case <-done:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(done); return <-peak }
}
