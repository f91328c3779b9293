package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	fx "github.com/modelplaneai/fleet-scheduler/internal/testkit/fixture"
)

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
	xr := fx.Deployment("m").Replicas(4).Engines(fx.Standalone("main", fx.GPURequest(8))).Obj()
	fatal := request(t, xr, nil, nil)
	fatal.Input = &structpb.Struct{Fields: map[string]*structpb.Value{
		"apiVersion": structpb.NewStringValue("scheduler.fn.modelplane.ai/v1beta1"), "kind": structpb.NewStringValue("Inptu"),
	}}
	calls := []*fnv1.RunFunctionRequest{fatal, request(t, xr, []any{a}, nil), request(t, xr, []any{a, b}, nil)}
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
		`fleet_scheduler_calls_total{result="ok"}`:           2,
		`fleet_scheduler_calls_total{result="fatal"}`:        1,
		`fleet_scheduler_calls_total{result="error"}`:        0,
		`fleet_scheduler_call_duration_seconds_count`:        3,
		`fleet_scheduler_replicas_unplaced` + deployment:     1,
		`fleet_scheduler_replacements_total` + deployment:    0,
		`fleet_scheduler_pools_whole_node{reason="invalid"}`: 1,
		`fleet_scheduler_pools_whole_node{reason="missing"}`: 1,
		`fleet_scheduler_pools_whole_node{reason="stale"}`:   0,
		`fleet_scheduler_assumed_placements`:                 0,
		`fleet_scheduler_largest_free_devices{model="gpu"}`:  0,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="RunFunction",grpc_service="apiextensions.fn.proto.v1.FunctionRunnerService",grpc_type="unary"}`: 3,
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
		{Msg: "Called", XR: xrName, Outcome: "placed", Placed: 3, Unplaced: 1},
		{Msg: "Warning: invalid pool report, using whole-node accounting", Cluster: "b", Pool: "h100", Defect: `observedAt: "yesterday" is not an RFC 3339 time`},
	}
	if len(lines) > 0 {
		lines = lines[1:]
	}
	if diff := cmp.Diff(wantLines, lines); diff != "" {
		t.Errorf("log lines after the first: -want, +got:\n%s", diff)
	}
}
