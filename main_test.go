package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/crossplane/function-sdk-go"
	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	agentv1alpha1 "github.com/modelplaneai/fleet-scheduler/apis/agent/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/apis/v1alpha1"
	"github.com/modelplaneai/fleet-scheduler/internal/codec"
	"github.com/modelplaneai/fleet-scheduler/internal/fleet"
	"github.com/modelplaneai/fleet-scheduler/internal/fnflags"
	"github.com/modelplaneai/fleet-scheduler/internal/plan"
	"github.com/modelplaneai/fleet-scheduler/internal/server"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/benchfleet"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/clitest"
	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
	"github.com/modelplaneai/fleet-scheduler/internal/testkit/wiretest"
	"github.com/modelplaneai/fleet-scheduler/scheduling"
)

// TestServedOverGRPC serves requests through a gRPC server and connection
// with the request codec, as main.go does: gRPC hands the codec a request
// of a few MB in many HTTP/2 frames, and the function recycles its copy
// from one call to the next, a smaller request in between. Every response
// must be what a fresh server gives for the request decoded in process.
func TestServedOverGRPC(t *testing.T) {
	lis := bufconn.Listen(1 << 20)
	requests := codec.New(fleet.RequiredClusters, fleet.RequiredReplicas)
	srv := grpc.NewServer(grpc.ForceServerCodecV2(requests), grpc.MaxRecvMsgSize(64<<20))
	served := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	fnv1.RegisterFunctionRunnerServiceServer(srv, requests.Server(served))
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	client := fnv1.NewFunctionRunnerServiceClient(dialBufconn(t, lis))

	bigClusters, bigReplicas := benchFleet(500)
	big := fleetRequest(benchDeployment(), bigClusters, bigReplicas, nil)
	smallClusters, smallReplicas := benchFleet(20)
	small := fleetRequest(benchDeployment(), smallClusters, smallReplicas, nil)
	if size := proto.Size(big); size < 1<<20 {
		t.Fatalf("the big request is %d bytes, want one gRPC sends in many frames", size)
	}
	for i, req := range []*fnv1.RunFunctionRequest{big, big, small, big} {
		fresh := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }}
		want, err := fresh.RunFunction(context.Background(), proto.CloneOf(req))
		if err != nil {
			t.Fatalf("call %d: in process RunFunction(...): %v", i, err)
		}
		got, err := client.RunFunction(context.Background(), req)
		if err != nil {
			t.Fatalf("call %d: RunFunction(...) over gRPC: %v", i, err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("call %d: RunFunction(...) over gRPC: in process -want, +got:\n%s", i, diff)
		}
	}
	// Every call gave its copy back; the pool keeps the biggest.
	if idle := requests.IdleBytes(); idle < proto.Size(big) {
		t.Errorf("after the calls: %d bytes of copies idle, want at least the big request's %d", idle, proto.Size(big))
	}
}

// TestFlags parses command lines as main does: every bad flag is refused
// before anything is served, with a message naming it.
func TestFlags(t *testing.T) {
	type want struct {
		err string
		cli *CLI
	}
	defaults := &CLI{
		Template:             fnflags.Template{Network: "tcp", Address: ":9443", Insecure: true, MetricsAddress: ":8080"},
		MaxRecvMessageSize:   64,
		MaxConcurrentStreams: 4, AssumedPlacementTTL: 2 * time.Minute, ObjectCache: true, NarrowRequests: true, FullReadEvery: 5 * time.Minute,
	}
	// A directory that holds files of the right names, none of them PEM.
	garbage := t.TempDir()
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.WriteFile(filepath.Join(garbage, f), []byte("not PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	with := func(f func(c *CLI)) *CLI {
		c := *defaults
		f(&c)
		return &c
	}
	cases := map[string]struct {
		reason string
		args   []string
		want   want
	}{
		"Defaults": {
			reason: "The defaults are valid.",
			args:   []string{"--insecure"},
			want:   want{cli: defaults},
		},
		"EveryBoundHolds": {
			reason: "Each bound is inclusive, and 0 turns the ledger off.",
			args: []string{
				"--insecure", "--max-recv-message-size=4", "--assumed-placement-ttl=0", "--full-read-every=1h", "--metrics-address=127.0.0.1:0",
				"--address=127.0.0.1:0", "--max-concurrent-streams=0",
			},
			want: want{cli: with(func(c *CLI) {
				c.MaxRecvMessageSize, c.AssumedPlacementTTL, c.FullReadEvery, c.MetricsAddress, c.Address, c.MaxConcurrentStreams = 4, 0, time.Hour, "127.0.0.1:0", "127.0.0.1:0", 0
			})},
		},
		"NoMetrics": {
			reason: "An empty --metrics-address serves no metrics, as before.",
			args:   []string{"--insecure", "--metrics-address="},
			want:   want{cli: with(func(c *CLI) { c.MetricsAddress = "" })},
		},
		"UnixSocket": {
			reason: "A unix socket is a path.",
			args:   []string{"--insecure", "--network=unix", "--address=/tmp/fn.sock"},
			want:   want{cli: with(func(c *CLI) { c.Network, c.Address = "unix", "/tmp/fn.sock" })},
		},
		"MaxRecvMessageSizeZero": {
			reason: "0 MB would start a server that refuses every call.",
			args:   []string{"--insecure", "--max-recv-message-size=0"},
			want:   want{err: `invalid --max-recv-message-size "0": must be between 4 and 2047 (MB)`},
		},
		"MaxRecvMessageSizeHuge": {
			reason: "No protobuf message reaches 2 GiB.",
			args:   []string{"--insecure", "--max-recv-message-size=4096"},
			want:   want{err: `invalid --max-recv-message-size "4096": must be between 4 and 2047 (MB)`},
		},
		"NegativeTTL": {
			reason: "A negative TTL silently turned the ledger off; it is refused.",
			args:   []string{"--insecure", "--assumed-placement-ttl=-1s"},
			want:   want{err: `invalid --assumed-placement-ttl "-1s": must be 0s (assume nothing), or between 10s and 15m0s`},
		},
		"ShortTTL": {
			reason: "An entry shorter than a response takes to be applied would miss the replica it stands for.",
			args:   []string{"--insecure", "--assumed-placement-ttl=1s"},
			want:   want{err: `invalid --assumed-placement-ttl "1s": must be 0s (assume nothing), or between 10s and 15m0s`},
		},
		"LongTTL": {
			reason: "An entry whose replica never appears would hold devices for hours.",
			args:   []string{"--insecure", "--assumed-placement-ttl=3h"},
			want:   want{err: `invalid --assumed-placement-ttl "3h0m0s": must be 0s (assume nothing), or between 10s and 15m0s`},
		},
		"ZeroFullReadEvery": {
			reason: "0 would read the whole fleet on every call, which --no-narrow-requests says.",
			args:   []string{"--insecure", "--full-read-every=0"},
			want:   want{err: `invalid --full-read-every "0s": must be between 1m0s and 1h0m0s; --no-narrow-requests reads the whole fleet on every call`},
		},
		"LongFullReadEvery": {
			reason: "A day without a full read leaves unlabelled replicas unseen for a day.",
			args:   []string{"--insecure", "--full-read-every=24h"},
			want:   want{err: `invalid --full-read-every "24h0m0s": must be between 1m0s and 1h0m0s`},
		},
		"NegativeStreams": {
			reason: "kong refuses what is not a uint32, naming the flag.",
			args:   []string{"--insecure", "--max-concurrent-streams=-1"},
			want:   want{err: `--max-concurrent-streams: expected a valid 32 bit uint but got "-1"`},
		},
		"Network": {
			reason: "gRPC serves over a stream network only.",
			args:   []string{"--insecure", "--network=udp"},
			want:   want{err: `invalid --network "udp": must be tcp, tcp4, tcp6 or unix`},
		},
		"AddressWithoutPort": {
			reason: "A TCP address needs a port.",
			args:   []string{"--insecure", "--address=localhost"},
			want:   want{err: `invalid --address "localhost": must be host:port, or :port`},
		},
		"AddressPortNotANumber": {
			reason: "A port is a number.",
			args:   []string{"--insecure", "--address=:grpc"},
			want:   want{err: `invalid --address ":grpc": port "grpc" must be a number from 0 to 65535`},
		},
		"MetricsAddressPortTooBig": {
			reason: "A port is at most 65535.",
			args:   []string{"--insecure", "--metrics-address=:80800"},
			want:   want{err: `invalid --metrics-address ":80800": port "80800" must be a number from 0 to 65535`},
		},
		"MetricsOnTheGRPCPort": {
			reason: "Both servers on one port: the metrics server could not listen, and said so only in a log line.",
			args:   []string{"--insecure", "--address=:9443", "--metrics-address=127.0.0.1:9443"},
			want:   want{err: `invalid --metrics-address "127.0.0.1:9443": must not be --address's port`},
		},
		"NoCredentials": {
			reason: "Without --insecure the certificates are required, and the message names the flag and its variable.",
			args:   []string{},
			want:   want{err: `--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) is required without --insecure`},
		},
		"CertsDirMissing": {
			reason: "A directory with no certificates was refused only once the server started, after its start line.",
			args:   []string{"--tls-server-certs-dir=/nonexistent/certs"},
			want:   want{err: `invalid --tls-server-certs-dir "/nonexistent/certs": cannot load X509 keypair: open /nonexistent/certs/tls.crt: no such file or directory (it must hold tls.crt, tls.key and ca.crt)`},
		},
		"CertsNotPEM": {
			reason: "Files of the right names that hold no key pair are refused.",
			args:   []string{"--tls-server-certs-dir=" + garbage},
			want:   want{err: `invalid --tls-server-certs-dir "` + garbage + `": cannot load X509 keypair: tls: failed to find any PEM data in certificate input`},
		},
		"InsecureIgnoresCertsDir": {
			reason: "With --insecure the directory is ignored, as the template's flag help says.",
			args:   []string{"--insecure", "--tls-server-certs-dir=/nonexistent/certs"},
			want:   want{cli: with(func(c *CLI) { c.TLSCertsDir = "/nonexistent/certs" })},
		},
		"EveryErrorNamed": {
			reason: "Two bad flags are both named.",
			args:   []string{"--insecure", "--max-recv-message-size=0", "--full-read-every=1s"},
			want:   want{err: "invalid --max-recv-message-size \"0\": must be between 4 and 2047 (MB): a request holds what the last response composed, up to 4 MiB, and no protobuf message reaches 2 GiB\ninvalid --full-read-every \"1s\""},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("TLS_SERVER_CERTS_DIR", "")
			cli := &CLI{}
			k, err := parser(cli)
			if err != nil {
				t.Fatal(err)
			}
			_, err = k.Parse(tc.args)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.want.err == "" && got != "" || !strings.Contains(got, tc.want.err) {
				t.Errorf("%s\nParse(%q): want an error containing %q, got %q", tc.reason, tc.args, tc.want.err, got)
			}
			if tc.want.cli == nil {
				return
			}
			if diff := cmp.Diff(tc.want.cli, cli); diff != "" {
				t.Errorf("%s\nParse(%q): -want flags, +got:\n%s", tc.reason, tc.args, diff)
			}
		})
	}
}

// freePort is a loopback port nothing listens at, as the kernel hands one
// out.
func freePort(t *testing.T) int {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a buffer a process writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// scrape is every sample of a Prometheus text exposition but the
// histograms' buckets, by name{labels}.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("cannot scrape %s: %v", url, err)
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for l := range strings.Lines(string(body)) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("scraped %q: %v", l, err)
		}
		out[l[:i]] = v
	}
	return out
}

// buildFunction builds the function's binary, as its image holds it.
func buildFunction(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "function")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinaryRefusesBadConfiguration runs the function's binary with bad
// flags: each exits non-zero before its start line, with a message naming
// the flag.
func TestBinaryRefusesBadConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the function's binary")
	}
	bin := buildFunction(t)
	held, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	free := func() string { return "--address=127.0.0.1:" + strconv.Itoa(freePort(t)) }
	cases := map[string]struct {
		reason string
		args   []string
		want   string
	}{
		"MessageSizeZero": {
			reason: "It started a server that refused every call, with nothing in its log.",
			args:   []string{"--insecure", free(), "--max-recv-message-size=0"},
			want:   `invalid --max-recv-message-size "0": must be between 4 and 2047 (MB)`,
		},
		"NegativeTTL": {
			reason: "It silently turned the ledger off.",
			args:   []string{"--insecure", free(), "--assumed-placement-ttl=-1s"},
			want:   `invalid --assumed-placement-ttl "-1s"`,
		},
		"NoCertificates": {
			reason: "A certificates directory that holds none was refused after the start line.",
			args:   []string{free(), "--tls-server-certs-dir=" + t.TempDir()},
			want:   `invalid --tls-server-certs-dir`,
		},
		"MetricsPortHeld": {
			reason: "A metrics port another process holds left the function serving without metrics.",
			args:   []string{"--insecure", free(), "--metrics-address=" + held.Addr().String()},
			want:   `cannot listen for metrics at --metrics-address "` + held.Addr().String() + `"`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
				t.Fatalf("%s\n%s %q: want a non-zero exit, got %v\n%s", tc.reason, bin, tc.args, err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%s\n%s %q: want output containing %q, got:\n%s", tc.reason, bin, tc.args, tc.want, out)
			}
			if strings.Contains(string(out), "Starting fleet-scheduler") {
				t.Errorf("%s\n%s %q: logged its start line before refusing:\n%s", tc.reason, bin, tc.args, out)
			}
		})
	}
}

// TestBinaryOperable runs the function's binary as Crossplane would, sends
// it a Fatal call, one short of capacity and one reading an invalid pool
// report over gRPC, and checks what on-call would see: its log lines and
// its metrics.
func TestBinaryOperable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the function's binary")
	}
	bin := buildFunction(t)
	// The binary as built says what it is.
	if out, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "fleet-scheduler ") {
		t.Errorf("%s --version: %v, printed %q; want exit 0 and a line starting fleet-scheduler", bin, err, out)
	}
	grpcAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	var logs syncBuffer
	cmd := exec.CommandContext(t.Context(), bin, "--insecure", "--address="+grpcAddr, "--metrics-address="+metricsAddr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := fnv1.NewFunctionRunnerServiceClient(conn)

	gpu := fx.GPU("gpu", 8, "80Gi")
	a := fx.Cluster("a").Pools(fx.Pool("h100", 2).Devices(gpu).Obj()).Obj()
	b := fx.Cluster("b").Pools(fx.Pool("h100", 1).Devices(gpu).RawObservation(`"yesterday"`, "1", "[]").Obj()).Obj()
	b.Metadata.ResourceVersion = "7"
	// c's report is usable: 16 free GPUs, two nodes of 8, by the binary's
	// own clock.
	c := fx.Cluster("c").Pools(fx.Pool("h100", 2).Devices(gpu).Observed(time.Now().Add(-30*time.Second), 2, fx.NodesFree(2, "gpu", 8)).Obj()).Obj()
	xr := fx.Deployment("m").Replicas(4).Engines(fx.Standalone("main", fx.GPURequest(8))).Obj()
	fatal := request(t, xr, nil, nil)
	fatal.Input = &structpb.Struct{Fields: map[string]*structpb.Value{
		"apiVersion": structpb.NewStringValue("scheduler.fn.modelplane.ai/v1beta1"), "kind": structpb.NewStringValue("Inptu"),
	}}
	// Three 4-GPU replicas on c's two free nodes of 8, where whole nodes
	// would place two: one beyond whole-node accounting.
	small := fx.Deployment("n").Replicas(3).Engines(fx.Standalone("main", fx.GPURequest(4))).Obj()
	calls := []*fnv1.RunFunctionRequest{fatal, request(t, xr, []any{a}, nil), request(t, xr, []any{a, b, c}, nil), request(t, small, []any{c}, nil)}
	for i, req := range calls {
		// The server may not listen yet: wait for it, as Crossplane would.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := client.RunFunction(ctx, req, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("call %d: RunFunction(...): %v", i, err)
		}
	}

	got := scrape(t, "http://"+metricsAddr+"/metrics")
	deployment := `{deployment="` + fx.Namespace + `/m"}`
	want := map[string]float64{
		`fleet_scheduler_calls_total{result="ok"}`:           3,
		`fleet_scheduler_calls_total{result="fatal"}`:        1,
		`fleet_scheduler_calls_total{result="error"}`:        0,
		`fleet_scheduler_call_duration_seconds_count`:        4,
		`fleet_scheduler_replicas_beyond_whole_node_total`:   1,
		`fleet_scheduler_replicas_unplaced` + deployment:     0,
		`fleet_scheduler_replacements_total` + deployment:    0,
		`fleet_scheduler_pools_whole_node{reason="invalid"}`: 1,
		`fleet_scheduler_pools_whole_node{reason="missing"}`: 1,
		`fleet_scheduler_pools_whole_node{reason="stale"}`:   0,
		`fleet_scheduler_assumed_placements`:                 0,
		// c's last ledger, n's: its three 4-GPU replicas left one node 4.
		`fleet_scheduler_largest_free_devices{model="gpu"}`: 4,
		// As reported, before the call placed: a pool's report, not the
		// ledger.
		`fleet_scheduler_pool_free_devices{cluster="c",device="gpu",pool="h100"}`:                                                                              16,
		`fleet_scheduler_pool_devices{cluster="c",device="gpu",pool="h100"}`:                                                                                   16,
		`fleet_scheduler_pool_accounting{cluster="c",mode="free-devices",pool="h100"}`:                                                                         1,
		`fleet_scheduler_pool_accounting{cluster="a",mode="whole-node",pool="h100"}`:                                                                           1,
		`fleet_scheduler_pool_accounting{cluster="b",mode="whole-node",pool="h100"}`:                                                                           1,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1.FunctionRunnerService",grpc_type="unary"}`: 4,
	}
	picked := map[string]float64{}
	for k := range want {
		if v, ok := got[k]; ok {
			picked[k] = v
		}
	}
	if diff := cmp.Diff(want, picked); diff != "" {
		t.Errorf("scraped metrics: -want, +got:\n%s", diff)
	}

	// The log: one JSON object a line (zap's production encoder).
	type logLine struct {
		Msg      string         `json:"msg"`
		XR       string         `json:"xr"`
		Outcome  string         `json:"outcome"`
		Error    string         `json:"error"`
		Placed   int            `json:"placed"`
		Unplaced int            `json:"unplaced"`
		Cluster  string         `json:"cluster"`
		Pool     string         `json:"pool"`
		Defect   string         `json:"defect"`
		Version  string         `json:"version"`
		Flags    map[string]any `json:"flags"`
	}
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a log line is not JSON: %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 || lines[0].Msg != "Starting fleet-scheduler" || lines[0].Version == "" || lines[0].Flags["metricsAddress"] != metricsAddr {
		t.Errorf("the first log line: want Starting fleet-scheduler with its version and flags, got %+v", lines)
	}
	xrName := fx.Namespace + "/m"
	wantLines := []logLine{
		{Msg: "Called", XR: xrName, Outcome: "fatal", Error: `invalid Function input: kind: Unsupported value: "Inptu": supported values: "Input"`},
		{Msg: "Called", XR: xrName, Outcome: "placed", Placed: 2, Unplaced: 2},
		{Msg: "Called", XR: xrName, Outcome: "placed", Placed: 4, Unplaced: 0},
		{Msg: "Warning: invalid pool report, using whole-node accounting", Cluster: "b", Pool: "h100", Defect: `observedAt: "yesterday" is not an RFC 3339 time`},
		{Msg: "Called", XR: fx.Namespace + "/n", Outcome: "placed", Placed: 3},
	}
	if len(lines) > 0 {
		lines = lines[1:]
	}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("log lines after the first: -want, +got:\n%s", diff)
	}
}

// Hostile requests, served by the server main.go runs, in process: each
// one is answered, in bounded time and memory, with a clear result, and
// the server serves the next call. docs/production.md has the numbers.

// hostileServer is the server main.go runs, with its defaults, on an
// in-process connection.
func hostileServer(t *testing.T) *grpc.ClientConn {
	t.Helper()
	so, err := server.Options(function.Insecure(true), function.MaxRecvMessageSize(defaultMaxRecvMessageSizeMB<<20), function.WithMetricsServer(""))
	if err != nil {
		t.Fatal(err)
	}
	fn := &Function{log: logging.NewNopLogger(), now: func() time.Time { return benchNow }, fleet: fleet.NewReader(), planner: plan.Planner{Selectors: scheduling.NewSelectors()}}
	srv := server.New(so, codec.New(fleet.RequiredClusters, fleet.RequiredReplicas), fn, defaultMaxConcurrentStreams)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return dialBufconn(t, lis, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(benchfleet.NewClientCodec()), grpc.MaxCallRecvMsgSize(1<<30)))
}

// Wire fragments of the messages a RunFunctionRequest is made of.
const (
	fieldObserved          protowire.Number = 2 // RunFunctionRequest.observed
	fieldRequiredResources protowire.Number = 8 // RunFunctionRequest.required_resources
	fieldComposite         protowire.Number = 1 // State.composite
	fieldResource          protowire.Number = 1 // Resource.resource
	fieldItems             protowire.Number = 1 // Resources.items
	fieldStructValue       protowire.Number = 5 // Value.struct_value
	fieldListValue         protowire.Number = 6 // Value.list_value
	fieldStringValue       protowire.Number = 3 // Value.string_value
)

func structValue(s []byte) []byte { return wiretest.BytesField(fieldStructValue, s) }

func listValue(values ...[]byte) []byte {
	var l []byte
	for _, v := range values {
		l = append(l, wiretest.BytesField(1, v)...)
	}
	return wiretest.BytesField(fieldListValue, l)
}

func stringValue(s string) []byte { return wiretest.BytesField(fieldStringValue, []byte(s)) }

// structWith is a Struct's bytes with entries set at path, nested objects
// created as needed: an entry of the same key written after another wins,
// as protobuf decodes a map, so the entry replaces any there.
func structWith(t *testing.T, s *structpb.Struct, path []string, value []byte) []byte {
	t.Helper()
	b := wiretest.Marshalled(t, s)
	if len(path) == 1 {
		return append(b, wiretest.StructEntry(path[0], value)...)
	}
	child := s.GetFields()[path[0]].GetStructValue()
	if child == nil {
		child = &structpb.Struct{}
	}
	return append(b, wiretest.StructEntry(path[0], structValue(structWith(t, child, path[1:], value)))...)
}

// withComposite is a request with the XR's Struct given as bytes.
func withComposite(t *testing.T, req *fnv1.RunFunctionRequest, xr []byte) []byte {
	t.Helper()
	req = proto.CloneOf(req)
	req.Observed.Composite = nil
	composite := wiretest.BytesField(fieldComposite, wiretest.BytesField(fieldResource, xr))
	return append(wiretest.Marshalled(t, req), wiretest.BytesField(fieldObserved, composite)...)
}

// withItems is a request with more items of a required resource, each a
// Struct given as bytes, after those it has.
func withItems(t *testing.T, req *fnv1.RunFunctionRequest, name string, items ...[]byte) []byte {
	t.Helper()
	b := wiretest.Marshalled(t, req)
	var resources []byte
	for _, it := range items {
		resources = append(resources, wiretest.BytesField(fieldItems, wiretest.BytesField(fieldResource, it))...)
	}
	// Of two entries of a key the codec keeps the last: this one carries
	// the request's items first.
	for _, it := range req.GetRequiredResources()[name].GetItems() {
		resources = append(wiretest.BytesField(fieldItems, wiretest.Marshalled(t, it)), resources...)
	}
	entry := wiretest.Cat(wiretest.BytesField(1, []byte(name)), wiretest.BytesField(2, resources))
	return append(b, wiretest.BytesField(fieldRequiredResources, entry)...)
}

// manyKeys is a Struct of n string entries.
func manyKeys(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, wiretest.StructEntry(fmt.Sprintf("k%07d", i), stringValue("v"))...)
	}
	return b
}

// nested is a Struct nested depth deep: {"a": {"a": ... {}}}. Each level
// is a header, the entry's and its value's tags and lengths, before the
// level inside it: the lengths are known from the inside out.
func nested(depth int) []byte {
	headers := make([][]byte, depth)
	inner := 0
	for i := range depth {
		value := protowire.AppendVarint(protowire.AppendTag(nil, fieldStructValue, protowire.BytesType), uint64(inner))
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendVarint(entry, 1)
		entry = append(entry, 'a')
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendVarint(entry, uint64(len(value)+inner))
		entry = append(entry, value...)
		header := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), uint64(len(entry)+inner))
		headers[depth-1-i] = append(header, entry...)
		inner += len(headers[depth-1-i])
	}
	return slices.Concat(headers...)
}

// smallFleet is a request the server answers as it should: a few clusters,
// a few replicas, the deployment placed.
func smallFleet() *fnv1.RunFunctionRequest {
	clusters, replicas := benchFleet(50)
	return fleetRequest(benchDeployment(), clusters[:5], replicas, nil)
}

func TestHostileRequests(t *testing.T) {
	type answer struct {
		rsp *fnv1.RunFunctionResponse
		err error
	}
	cases := map[string]struct {
		reason string
		// request is the request's bytes.
		request func(t *testing.T) []byte
		// check says what is wrong with the answer, if anything.
		check func(a answer) string
		// maxHeap bounds the heap the call may take at its peak, above
		// what was live before, in MiB.
		maxHeap int
	}{
		"Garbage": {
			reason: "64 MB of random bytes are no RunFunctionRequest: refused, as a decode error.",
			request: func(*testing.T) []byte {
				b := make([]byte, 64_000_000)
				rng := rand.NewChaCha8([32]byte{13})
				_, _ = rng.Read(b)
				return b
			},
			check: func(a answer) string {
				return wantError(a.err, "cannot decode RunFunctionRequest: truncated or malformed protobuf")
			},
			maxHeap: 256,
		},
		"XRNestedDeep": {
			reason: "An XR nested 10,000 deep is deeper than protobuf decodes: refused, as a decode error.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				return withComposite(t, req, structWith(t, req.GetObserved().GetComposite().GetResource(), []string{"spec", "junk"}, structValue(nested(10_000))))
			},
			check: func(a answer) string {
				return wantError(a.err, "exceeded maximum recursion depth") // protobuf varies the space after "proto:"
			},
			maxHeap: 64,
		},
		"PoolReportNestedDeep": {
			reason: "A cluster whose pool report nests 10,000 deep does not read; the rest of the fleet is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				c := fx.Cluster("deep").Pools(fx.Pool("p", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
				s := mustStruct(c)
				pools := s.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()
				pool := structWith(t, pools[0].GetStructValue(), []string{"nodesByFreeDevices"}, listValue(structValue(nested(10_000))))
				return withItems(t, req, fleet.RequiredClusters, structWith(t, s, []string{"status", "gpuPools"}, listValue(structValue(pool))))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read InferenceCluster deep: status.gpuPools[0].nodesByFreeDevices[0].a.a.a.a.a.a.a.a.(9977 more).a.a.a.a.a.a.a.a.a.a.a.a.a: nested deeper than 10000")
			},
			maxHeap: 64,
		},
		"ReplicaEnginesNestedDeep": {
			reason: "Another deployment's replica whose pods are not scheduled, so charged, and whose engines nest 10,000 deep: it does not read, is charged conservatively, and a warning names it.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				r := mustStruct(unscheduled(benchReplicaOn("cluster-000")))
				// An engine whose members are a Struct 10,000 deep, not a list.
				engine := append(wiretest.StructEntry("name", stringValue("main")), wiretest.StructEntry("members", structValue(nested(10_000)))...)
				return withItems(t, req, fleet.RequiredReplicas, structWith(t, r, []string{"spec", "engines"}, listValue(structValue(engine))))
			},
			check: func(a answer) string {
				r := benchReplicaOn("cluster-000")
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read ModelReplica "+r.Metadata.Namespace+"/"+r.Metadata.Name+": spec.engines[0].members")
			},
			maxHeap: 64,
		},
		"XRManyKeys": {
			reason: "An XR with a million keys in its template's labels: larger than any object the API server stores, refused before it is decoded.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				return withComposite(t, req, structWith(t, req.GetObserved().GetComposite().GetResource(), []string{"spec", "template", "metadata", "labels"}, structValue(manyKeys(1_000_000))))
			},
			check: func(a answer) string {
				return wantFatal(a.rsp, a.err, "cannot read ModelDeployment: it is 17003052 bytes, more than the 8 MiB of any the API server stores")
			},
			maxHeap: 512,
		},
		"ReplicaManyKeys": {
			reason: "The deployment's own replica with a million more labels: the two the function needs are read among them, so it is kept (a desired replica of its name) and counts toward spec.replicas.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				r := mustStruct(ownReplicaOn("cluster-000"))
				labels := wiretest.Marshalled(t, r.GetFields()["metadata"].GetStructValue().GetFields()["labels"].GetStructValue())
				return withItems(t, req, fleet.RequiredReplicas, structWith(t, r, []string{"metadata", "labels"}, structValue(append(labels, manyKeys(1_000_000)...))))
			},
			check: func(a answer) string {
				if msg := wantPlaced(a.rsp, a.err, benchNewReplicas, ""); msg != "" {
					return msg
				}
				// New replicas take the lowest free indexes, two at most per
				// cluster: index 7 is desired only if the replica was kept.
				if _, ok := a.rsp.GetDesired().GetResources()["replica-cluster-000-7"]; ok {
					return ""
				}
				return "want the replica at index 7 of cluster-000 kept among the desired ones, got " + describe(a.rsp, a.err)
			},
			maxHeap: 128,
		},
		"DeviceManyKeys": {
			reason: "A cluster whose device has a million attributes does not read; the rest of the fleet is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				req := smallFleet()
				c := mustStruct(fx.Cluster("attrs").Pools(fx.Pool("p", 4).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj())
				devices := c.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()[0].GetStructValue().GetFields()["devices"].GetListValue().GetValues()
				dev := structWith(t, devices[0].GetStructValue(), []string{"attributes"}, structValue(manyKeys(1_000_000)))
				pool := structWith(t, c.GetFields()["status"].GetStructValue().GetFields()["gpuPools"].GetListValue().GetValues()[0].GetStructValue(), []string{"devices"}, listValue(structValue(dev)))
				return withItems(t, req, fleet.RequiredClusters, structWith(t, c, []string{"status", "gpuPools"}, listValue(structValue(pool))))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "cannot read InferenceCluster attrs: status.gpuPools[0].devices[0]: 17000256 bytes, more than the 65536")
			},
			maxHeap: 128,
		},
		"MillionEmptyReplicas": {
			reason: "A million empty ModelReplicas: on no cluster, they charge nothing, and are left out as they are read.",
			request: func(t *testing.T) []byte {
				t.Helper()
				items := make([][]byte, 1_000_000)
				for i := range items {
					items[i] = []byte{}
				}
				return withItems(t, smallFleet(), fleet.RequiredReplicas, items...)
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 128,
		},
		"LongCELOnManyDevices": {
			reason: "A 10 KiB CEL selector on 10,000 distinct pool devices: each evaluated once, within DRA's cost limit.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("gpu", 1, longCEL(10<<10)))}
				return wiretest.Marshalled(t, fleetRequest(xr, distinctDevices(100, 10, 10), nil, nil))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 128,
		},
		"MillionReplicasWanted": {
			reason: "A deployment that wants a million replicas, on a pool of a million nodes: more than any response holds, refused before it is scheduled.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := fx.Deployment("huge").Replicas(1_000_000).Obj()
				c := fx.Cluster("big").Pools(fx.Pool("p", 1<<20).Devices(fx.GPU("gpu", 8, "80Gi")).Obj()).Obj()
				return wiretest.Marshalled(t, fleetRequest(xr, []*v1alpha1.InferenceCluster{c}, nil, nil))
			},
			check: func(a answer) string {
				return wantFatal(a.rsp, a.err, "invalid ModelDeployment: spec.replicas: Invalid value: 1000000: must be at most 16384")
			},
			maxHeap: 64,
		},
		"CELOverCost": {
			reason: "A 10 KiB CEL selector over DRA's cost limit is an invalid nodeSelector, said so, and places nothing.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("gpu", 1, quadraticCEL(10<<10)))}
				return wiretest.Marshalled(t, fleetRequest(xr, distinctDevices(100, 10, 10), nil, nil))
			},
			check: func(a answer) string {
				return wantCondition(a.rsp, a.err, condReplicasScheduled, reasonInvalidNodeSelector, "estimated cost")
			},
			maxHeap: 128,
		},
		"ManyUnreadableReplicas": {
			reason: "100,000 replicas of another deployment that do not read: a hundred warnings, and one that says how many more.",
			request: func(t *testing.T) []byte {
				t.Helper()
				items := make([][]byte, 100_000)
				for i := range items {
					meta := wiretest.Cat(wiretest.StructEntry("name", stringValue(fmt.Sprintf("broken-%06d", i))), wiretest.StructEntry("namespace", stringValue("team-01")))
					items[i] = wiretest.Cat(wiretest.StructEntry("metadata", structValue(meta)), wiretest.StructEntry("spec", stringValue("broken")))
				}
				return withItems(t, smallFleet(), fleet.RequiredReplicas, items...)
			},
			check: func(a answer) string {
				if why := wantPlaced(a.rsp, a.err, benchNewReplicas, "99900 more warnings like the ones above are not shown"); why != "" {
					return why
				}
				if n := len(a.rsp.GetResults()); n > maxWarnings+2 {
					return fmt.Sprintf("want at most %d results, got %d", maxWarnings+2, n)
				}
				return ""
			},
			maxHeap: 512,
		},
		"WidePools": {
			reason: "A cluster of 800 pools, each of 16 device kinds and 64 buckets that list them all.",
			request: func(t *testing.T) []byte {
				t.Helper()
				xr := benchDeployment()
				xr.Spec.Template.Spec.Engines = []v1alpha1.Engine{fx.Standalone("main", fx.Request("d3", 2), fx.Request("d7", 1))}
				return withItems(t, fleetRequest(xr, nil, nil, nil), fleet.RequiredClusters, widePools(t, 800, 16, 64))
			},
			check: func(a answer) string {
				return wantPlaced(a.rsp, a.err, benchNewReplicas, "")
			},
			maxHeap: 768,
		},
	}
	conn := hostileServer(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := tc.request(t)
			var a answer
			began := time.Now()
			heap := peakHeap(func() {
				rsp := &fnv1.RunFunctionResponse{}
				a.err = conn.Invoke(t.Context(), fnv1.FunctionRunnerService_RunFunction_FullMethodName, benchfleet.Encoded{req}, rsp)
				if a.err == nil {
					a.rsp = rsp
				}
			})
			took := time.Since(began)
			t.Logf("%s: %d bytes, %s, peak heap %.1f MiB: %s", name, len(req), took.Round(time.Millisecond), float64(heap)/(1<<20), describe(a.rsp, a.err))
			if why := tc.check(a); why != "" {
				t.Errorf("%s\n%s", tc.reason, why)
			}
			if heap > uint64(tc.maxHeap)<<20 {
				t.Errorf("%s\nthe call took %.0f MiB of heap at its peak, want at most %d MiB", tc.reason, float64(heap)/(1<<20), tc.maxHeap)
			}
			// And the server serves the next call.
			rsp := &fnv1.RunFunctionResponse{}
			err := conn.Invoke(t.Context(), fnv1.FunctionRunnerService_RunFunction_FullMethodName, smallFleet(), rsp)
			if why := wantPlaced(rsp, err, benchNewReplicas, ""); why != "" {
				t.Errorf("the call after: %s", why)
			}
		})
	}
}

// longCEL is a selector of about n bytes that reads a device's serial
// number as often as it can: a disjunction no device satisfies but the
// last clause, which every one does.
func longCEL(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n-100; i++ {
		fmt.Fprintf(&b, "device.attributes[\"gpu.nvidia.com\"].serial == \"none-%05d\" || ", i)
	}
	b.WriteString(`device.attributes["gpu.nvidia.com"].serial.startsWith("s-")`)
	return b.String()
}

// quadraticCEL is a selector of about n bytes whose cost grows with the
// square of its list, far over DRA's limit.
func quadraticCEL(n int) string {
	var b strings.Builder
	b.WriteString("[0")
	for i := 1; b.Len() < n/2-40; i++ {
		fmt.Fprintf(&b, ",%d", i)
	}
	list := b.String() + "]"
	return fmt.Sprintf("%s.all(x, %s.all(y, x != y || device.attributes[\"gpu.nvidia.com\"].serial != \"\"))", list, list)
}

// distinctDevices is a fleet of clusters of pools of devices, each device
// distinct (its own serial number), so that CEL sees each once.
func distinctDevices(clusters, pools, devices int) []*v1alpha1.InferenceCluster {
	out := make([]*v1alpha1.InferenceCluster, 0, clusters)
	for c := range clusters {
		ps := make([]v1alpha1.GPUPool, 0, pools)
		for p := range pools {
			ds := make([]v1alpha1.Device, 0, devices)
			for d := range devices {
				dev := fx.GPU(fmt.Sprintf("gpu%d", d), 8, "80Gi")
				if d == 0 {
					dev.Name = "gpu"
				}
				dev.Attributes["serial"] = v1alpha1.DeviceAttribute{String: new(fmt.Sprintf("s-%d-%d-%d", c, p, d))}
				ds = append(ds, dev)
			}
			ps = append(ps, fx.Pool(fmt.Sprintf("p%d", p), 4).Devices(ds...).Obj())
		}
		out = append(out, fx.Cluster(fmt.Sprintf("c%03d", c)).Pools(ps...).Obj())
	}
	return out
}

// widePools is a cluster of pools of kinds device kinds d0, d1, ..., each
// pool observed with that many buckets, every one listing every kind: one
// pool encoded, then copied under each name.
func widePools(t *testing.T, pools, kinds, buckets int) []byte {
	t.Helper()
	ds := make([]v1alpha1.Device, 0, kinds)
	for k := range kinds {
		ds = append(ds, fx.GPU(fmt.Sprintf("d%d", k), 8, "80Gi"))
	}
	bs := make([]agentv1alpha1.Bucket, 0, buckets)
	for b := range buckets {
		free := make([]agentv1alpha1.Free, 0, kinds)
		for k := range kinds {
			free = append(free, agentv1alpha1.Free{Name: fmt.Sprintf("d%d", k), Count: int64((b + k) % 9)})
		}
		bs = append(bs, agentv1alpha1.Bucket{Nodes: 1, Free: free})
	}
	pool := wiretest.Marshalled(t, mustStruct(fx.Pool("p", int64(buckets)).Devices(ds...).Observed(benchNow.Add(-30*time.Second), int64(buckets), bs...).Obj()))
	list := make([][]byte, 0, pools)
	for p := range pools {
		list = append(list, structValue(append(slices.Clip(pool), wiretest.StructEntry("name", stringValue(fmt.Sprintf("p%03d", p)))...)))
	}
	return structWith(t, mustStruct(fx.Cluster("wide").Obj()), []string{"status", "gpuPools"}, listValue(list...))
}

// benchReplicaOn is another deployment's realistic replica on a cluster,
// scheduled after its pool's report: charged, so its engines are read.
// unscheduled is the replica with its pods not scheduled, so that every
// call reads and charges it.
func unscheduled(r *v1alpha1.ModelReplica) *v1alpha1.ModelReplica {
	r.Status.Conditions = []v1alpha1.Condition{{Type: "PodsScheduled", Status: "False"}}
	return r
}

// ownReplicaOn is a replica of benchDeployment's on the cluster, at index 7.
func ownReplicaOn(cluster string) *v1alpha1.ModelReplica {
	r := benchReplicaOn(cluster)
	d := benchDeployment()
	r.Metadata.Namespace = d.Metadata.Namespace
	r.Metadata.Labels[v1alpha1.LabelDeployment] = d.Metadata.Name
	r.Metadata.Labels[v1alpha1.LabelReplicaIndex] = "7"
	return r
}

func benchReplicaOn(cluster string) *v1alpha1.ModelReplica {
	_, replicas := benchFleet(100)
	r := replicas[99]
	r.Spec.ClusterName = cluster
	return r
}

// wantFatal wants a Fatal result, and nothing composed.
func wantFatal(rsp *fnv1.RunFunctionResponse, err error, contains string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL && strings.Contains(r.GetMessage(), contains) {
			if len(rsp.GetDesired().GetResources()) > 0 {
				return fmt.Sprintf("want nothing composed with the Fatal result, got %d resources", len(rsp.GetDesired().GetResources()))
			}
			return ""
		}
	}
	return fmt.Sprintf("want a Fatal result containing %q, got %s", contains, describe(rsp, err))
}

// wantCondition wants the XR's condition of a type with a reason, its
// message containing what.
func wantCondition(rsp *fnv1.RunFunctionResponse, err error, typ, reason, contains string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, c := range rsp.GetConditions() {
		if c.GetType() == typ && c.GetReason() == reason && strings.Contains(c.GetMessage(), contains) {
			return ""
		}
	}
	return fmt.Sprintf("want condition %s with reason %s and a message containing %q, got %v", typ, reason, contains, rsp.GetConditions())
}

func wantError(err error, contains string) string {
	if err == nil || !strings.Contains(status.Convert(err).Message(), contains) {
		return fmt.Sprintf("want an error containing %q, got %v", contains, err)
	}
	return ""
}

// wantPlaced wants placed replicas composed, and a warning naming what,
// if anything.
func wantPlaced(rsp *fnv1.RunFunctionResponse, err error, placed int, warns string) string {
	if err != nil {
		return fmt.Sprintf("want a response, got %v", err)
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return "want no Fatal result, got " + r.GetMessage()
		}
	}
	if got := composedReplicas(rsp); got != placed {
		return fmt.Sprintf("want %d replicas composed, got %d: %s", placed, got, describe(rsp, err))
	}
	if warns == "" {
		return ""
	}
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && strings.Contains(r.GetMessage(), warns) {
			return ""
		}
	}
	return fmt.Sprintf("want a warning naming %s, got %s", warns, describe(rsp, err))
}

// describe sums an answer up for a message.
func describe(rsp *fnv1.RunFunctionResponse, err error) string {
	if err != nil {
		msg := status.Convert(err).Message()
		return fmt.Sprintf("error %s: %.300s", status.Code(err), msg)
	}
	var results []string
	for _, r := range rsp.GetResults() {
		results = append(results, fmt.Sprintf("%s %.200s", r.GetSeverity(), r.GetMessage()))
	}
	if len(results) > 5 {
		results = append(results[:5], fmt.Sprintf("... %d results", len(results)))
	}
	return fmt.Sprintf("%d replicas, %d bytes, results [%s]", composedReplicas(rsp), proto.Size(rsp), strings.Join(results, "; "))
}

// TestVersionFlag: --version prints the binary's name, version and
// revision, and exits 0.
func TestVersionFlag(t *testing.T) {
	clitest.Version(t, "fleet-scheduler", func(opts ...kong.Option) (*kong.Kong, error) { return parser(&CLI{}, opts...) })
}
