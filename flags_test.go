package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestFlags parses command lines as main does: every bad flag is refused
// before anything is served, with a message naming it.
func TestFlags(t *testing.T) {
	type want struct {
		err string
		cli *CLI
	}
	defaults := &CLI{
		Network: "tcp", Address: ":9443", Insecure: true, MaxRecvMessageSize: 64, MetricsAddress: ":8080",
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
