package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/cluster"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/controller"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/freshness"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/metrics"
	"github.com/modelplaneai/fleet-scheduler/cmd/cluster-agent/internal/steering"
)

// Run runs the agent until SIGTERM or SIGINT, then stops: it gives up
// leadership (releasing the Lease, so another replica takes over at once),
// stops its informers and its servers, and returns nil.
func (c *CLI) Run() error {
	log := c.logger()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, log)
	runCtx := ctx

	if !clientfeatures.FeatureGates().Enabled(clientfeatures.AtomicFIFO) {
		// Without it an informer's cache does not say which
		// resourceVersion it holds everything up to, and no observedAt
		// could be proven.
		return errors.New("cannot prove how recent the view is: client-go's AtomicFIFO feature is off (KUBE_FEATURE_AtomicFIFO=false?); turn it on")
	}
	if err := c.validate(); err != nil {
		return err
	}
	cfg, err := c.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cannot create a client of the API server: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cannot create a client of the API server: %w", err)
	}

	taintRules, err := c.discover(ctx, log, client)
	if err != nil {
		return err
	}
	policies := c.discoverSteering(log, client)
	cl, err := cluster.New(client, dyn, cluster.Options{Namespaces: c.namespaces(), TaintRules: taintRules, AdmissionPolicies: policies})
	if err != nil {
		return err
	}

	var m *metrics.Metrics
	sources := cl.Sources()
	fs := make([]freshness.Source, 0, len(sources))
	for _, s := range sources {
		fs = append(fs, freshness.Source{Kind: s.Kind, Store: s.Store, ListWatch: s.ListWatch})
	}
	prover := freshness.New(fs, freshness.Options{Interval: c.SyncInterval, NoProbes: !c.SyncProbes, Log: log.WithName("freshness"), Observe: func(e freshness.Event) {
		m.Proofs.WithLabelValues(e.Kind, e.What).Inc()
		if e.What == "proven" {
			m.ProofLag.Observe(e.Lag.Seconds())
		}
	}})
	m = metrics.New(prover.Proven)

	var ready atomic.Bool
	health := leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	servers, err := c.serve(log, m, cl, &ready, health)
	if err != nil {
		return err
	}

	pools := &controller.Loop{Debounce: c.Debounce, Period: 10 * time.Second}
	keys := &controller.Keys{}
	replicas := &controller.Loop{Debounce: c.Debounce, Period: c.Resync, Periodic: func() { keys.Add(cl.ReplicaObservationKeys()...) }}
	if err := cl.OnPoolInputs(pools.Wake); err != nil {
		return err
	}
	if err := cl.OnReplicaInputs(func(k []string) { keys.Add(k...); replicas.Wake() }); err != nil {
		return err
	}

	log.Info("Starting", "podNamespaces", c.namespaces(), "deviceTaintRules", taintRules, "leaderElect", c.LeaderElect, "admissionPolicies", policies, "pod", c.PodNamespace+"/"+c.PodName)
	var wg sync.WaitGroup
	cl.Start(ctx)
	if err := cl.WaitForSync(ctx); err != nil {
		cl.Shutdown()
		shutdown(servers)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ready.Store(true)
	log.Info("Caches synced")
	wg.Go(func() { prover.Run(ctx) })

	// A follower's Pod lists no pool: clear what a crashed leader may have
	// left on it (the Pod outlives its containers).
	steerCfg := steering.Config{
		Window: c.SteeringWindow, MaxHold: c.SteeringMaxHold, GangWait: c.SteeringGangWait, ReplicaWait: c.SteeringReplicaWait,
		PinTimeout: c.SteeringPinTimeout, ReportPeriod: c.Heartbeat, PodNamespace: c.PodNamespace, PodName: c.PodName, AdmissionPolicies: policies,
	}
	if c.PodName != "" {
		clearCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		steering.New(steerCfg, cl, nil, client, clock.RealClock{}, log.WithName("steering").V(1), m, nil, nil).Unmark(clearCtx)
		cancel()
	}

	var leading atomic.Bool
	// stepDown, while set, is what the leader does as the agent shuts
	// down, before it gives up the Lease.
	var stepDown atomic.Pointer[func()]
	writer := &controller.StatusWriter{Client: dyn, Metrics: m, Writable: leading.Load}
	lead := func(ctx context.Context) {
		leading.Store(true)
		m.Leader.Set(1)
		defer func() { leading.Store(false); m.Leader.Set(0) }()
		log.Info("Leading: writing statuses")
		p := controller.NewPools(cl, writer, prover.Proven, clock.RealClock{}, log.WithName("pools"), m, c.Heartbeat)
		st := steering.New(steerCfg, cl, p, client, clock.RealClock{}, log.WithName("steering"), m, func() { cl.StartSteering(runCtx) }, pools.Wake)
		p.WithSteering(st)
		down := func() {
			// Shutting down: no report may say Steered while no agent
			// holds the pools' pods.
			st.Stop()
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			st.Unmark(stop)
			p.StepDown(stop, "the agent that steered the pool shut down; the next leader reports it again")
		}
		stepDown.Store(&down)
		defer stepDown.Store(nil)
		r := controller.NewReplicas(cl, writer, clock.RealClock{}, log.WithName("replicas"), m)
		// One round first, so that the first reports of a new leader
		// already see the pools its Pod lists.
		st.Reconcile(ctx)
		var lw sync.WaitGroup
		lw.Go(func() { st.Run(ctx) })
		lw.Go(func() { pools.Run(ctx, prover.Changed(), p.Reconcile) })
		// All of them when leading starts, then those that changed.
		keys.Add(cl.ReplicaObservationKeys()...)
		lw.Go(func() {
			replicas.Run(ctx, nil, func(ctx context.Context) {
				if retry := r.Reconcile(ctx, keys.Take()); len(retry) > 0 {
					keys.Add(retry...)
					time.AfterFunc(2*time.Second, replicas.Wake)
				}
			})
		})
		lw.Wait()
		if !c.LeaderElect && runCtx.Err() != nil {
			down()
		}
	}
	if c.LeaderElect {
		err = c.elect(ctx, log, client, health, lead, &leading, func() {
			if f := stepDown.Load(); f != nil {
				(*f)()
			}
		})
	} else {
		lead(ctx)
	}
	wg.Wait()
	cl.Shutdown()
	shutdown(servers)
	log.Info("Stopped")
	return err
}

// elect campaigns for the Lease and leads while it holds it, again and
// again, until ctx is done. Leading stops when the Lease is lost. When ctx
// is done while leading, stepDown runs before the Lease is given up.
func (c *CLI) elect(ctx context.Context, log logr.Logger, client kubernetes.Interface, health *leaderelection.HealthzAdaptor, lead func(context.Context), leading *atomic.Bool, stepDown func()) error {
	id := c.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("cannot name this replica for the Lease: %w", err)
		}
		id = host
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.LeaderElectionNS, Name: c.LeaderElectionID},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	for ctx.Err() == nil {
		var done sync.WaitGroup
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   c.LeaseDuration,
			RenewDeadline:   c.RenewDeadline,
			RetryPeriod:     c.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            c.LeaderElectionID,
			WatchDog:        health,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { done.Add(1); defer done.Done(); lead(ctx) },
				OnStoppedLeading: func() { leading.Store(false) },
				OnNewLeader: func(identity string) {
					log.Info("Leader", "identity", identity, "self", identity == id)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("cannot elect a leader: %w", err)
		}
		health.SetLeaderElection(le)
		// The elector's context ends after stepDown, so that the leader
		// still leads (and may write) while it steps down.
		leCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		go func() {
			select {
			case <-ctx.Done():
				if leading.Load() {
					stepDown()
				}
				cancel()
			case <-leCtx.Done():
			}
		}()
		le.Run(leCtx)
		cancel()
		// Leading stopped: let the writes in flight end before campaigning
		// again (their context is done).
		done.Wait()
	}
	return nil
}

// discover checks that the cluster serves what the agent reads and says
// whether DeviceTaintRules are served. It waits for an API server that
// cannot be reached yet.
func (c *CLI) discover(ctx context.Context, log logr.Logger, client kubernetes.Interface) (bool, error) {
	var resources *metav1.APIResourceList
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(context.Context) (bool, error) {
		var err error
		resources, err = client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1")
		switch {
		case err == nil:
			return true, nil
		case kerrors.IsNotFound(err):
			return false, fmt.Errorf("the cluster does not serve resource.k8s.io/v1 (ResourceSlices, DeviceClasses, ResourceClaims): the agent needs Kubernetes 1.34 or later: %w", err)
		default:
			log.Info("Cannot read the API server's resources yet; retrying", "error", err.Error())
			return false, nil
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return false, nil //nolint:nilerr // Stopped before discovery ended: a clean shutdown, not an error.
		}
		return false, err
	}
	served := slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "devicetaintrules" })
	if !served && c.DeviceTaintRules != "off" {
		// Kubernetes 1.33 to 1.36 serve DeviceTaintRules only as an alpha
		// or beta API, off by default. Where one is on, the devices its
		// rules taint would be counted free: refuse, unless told to.
		for _, gv := range []string{"resource.k8s.io/v1beta2", "resource.k8s.io/v1alpha3"} {
			rl, err := client.Discovery().ServerResourcesForGroupVersion(gv)
			if err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "devicetaintrules" }) {
				return false, fmt.Errorf("the cluster serves DeviceTaintRules as %s, which the agent does not read (it reads resource.k8s.io/v1, Kubernetes 1.37): the devices they taint would be counted free; turn that API off, or run with --device-taint-rules=off knowing it", gv)
			}
		}
	}
	if _, err := client.Discovery().ServerResourcesForGroupVersion(v1alpha1.Group + "/" + v1alpha1.Version); err != nil {
		log.Info("The cluster does not serve the agent's kinds yet: apply deploy/cluster-agent/ (its CRDs); waiting for them", "error", err.Error())
	}
	switch c.DeviceTaintRules {
	case "on":
		if !served {
			return false, errors.New("--device-taint-rules=on, but the cluster does not serve resource.k8s.io/v1 DeviceTaintRules")
		}
		return true, nil
	case "off":
		return false, nil
	default:
		return served, nil
	}
}

// validate refuses flags the agent cannot run with.
func (c *CLI) validate() error {
	for name, d := range map[string]time.Duration{
		"--steering-window": c.SteeringWindow, "--steering-max-hold": c.SteeringMaxHold, "--steering-gang-wait": c.SteeringGangWait,
		"--steering-replica-wait": c.SteeringReplicaWait, "--steering-pin-timeout": c.SteeringPinTimeout,
	} {
		if d <= 0 {
			return fmt.Errorf("%s: %s; it must be positive", name, d)
		}
	}
	if c.LeaderElect && c.LeaderElectionNS == "" {
		return errors.New("--leader-election-namespace (or POD_NAMESPACE) is needed to elect a leader; or --no-leader-elect")
	}
	return nil
}

// discoverSteering says whether the cluster serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicies and their
// bindings (Kubernetes 1.36 and later), which steering needs.
func (c *CLI) discoverSteering(log logr.Logger, client kubernetes.Interface) bool {
	rl, err := client.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		log.Info("Cannot read whether the cluster serves MutatingAdmissionPolicies; no pool is steered", "error", err.Error())
		return false
	}
	has := func(name string) bool {
		return slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == name })
	}
	return has("mutatingadmissionpolicies") && has("mutatingadmissionpolicybindings")
}

// namespaces are the namespaces whose pods the agent reads: "" for all.
func (c *CLI) namespaces() []string {
	if len(c.PodNamespaces) == 0 {
		return []string{""}
	}
	return c.PodNamespaces
}

// restConfig is the client configuration: the kubeconfig's, or the
// in-cluster one.
func (c *CLI) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if c.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("cannot configure a client of the API server (--kubeconfig, or in a pod): %w", err)
	}
	cfg.QPS, cfg.Burst = c.KubeAPIQPS, c.KubeAPIBurst
	cfg.UserAgent = "cluster-agent"
	return cfg, nil
}

// logger is the agent's structured logger, also client-go's (klog).
func (c *CLI) logger() logr.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(-c.Verbosity)}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if c.LogFormat == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	log := logr.FromSlogHandler(h)
	klog.SetLogger(log)
	return log
}

// serve starts the health and metrics servers.
func (c *CLI) serve(log logr.Logger, m *metrics.Metrics, cl *cluster.Cluster, ready *atomic.Bool, health *leaderelection.HealthzAdaptor) ([]*http.Server, error) {
	var servers []*http.Server
	if c.HealthAddress != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
			if err := health.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = fmt.Fprintln(w, "ok") // The client may have gone; nothing to do then.
		})
		// Ready once every cache has listed its kind, leader or not: a
		// replica that is not leading is ready to.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() {
				http.Error(w, "caches not synced: "+strings.Join(cl.Unsynced(), ", "), http.StatusServiceUnavailable)
				return
			}
			_, _ = fmt.Fprintln(w, "ok") // The client may have gone; nothing to do then.
		})
		s, err := listen(log, c.HealthAddress, mux)
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	if c.MetricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		s, err := listen(log, c.MetricsAddress, mux)
		if err != nil {
			shutdown(servers)
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// listen serves h on addr in the background.
func listen(log logr.Logger, addr string, h http.Handler) (*http.Server, error) {
	l, err := net.Listen("tcp", addr) //nolint:noctx // A server's listener, for the life of the process.
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Cannot serve", "address", addr)
		}
	}()
	log.Info("Serving", "address", l.Addr().String())
	return s, nil
}

func shutdown(servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}
