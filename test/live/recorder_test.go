package live

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/modelplaneai/fleet-scheduler/test/internal/pki"
	"github.com/modelplaneai/fleet-scheduler/test/internal/testenv"
)

// recorder stands between Crossplane and the function, over mTLS both
// ways, and passes every call's bytes on as they are: what it records of
// each request is what Crossplane sent, the required resources it
// answered and the bytes on the wire.
type recorder struct {
	addr string

	mu    sync.Mutex
	calls []recordedCall
}

// recordedCall is one RunFunction request as Crossplane sent it.
type recordedCall struct {
	at    time.Time
	bytes int
	// required are the names of the required resources the request
	// carries, sorted.
	required []string
}

// rawCodec passes messages on as the bytes they arrived as.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("cannot pass on a %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("cannot pass on a %T", v)
	}
	*b = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}

// startRecorder serves, with the function's server certificate, every call
// it gets on to the function at backend, as a client of ca's.
func startRecorder(t *testing.T, ca, server pki.KeyPair, backend string) *recorder {
	t.Helper()
	r := &recorder{addr: testenv.FreeLoopbackAddr(t)}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	serverCert, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client := pki.Client(t, ca, "recorder")
	clientCert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+backend,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{clientCert}, RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})),
		grpc.ForceServerCodecV2(rawCodec{}), grpc.MaxRecvMsgSize(1<<30),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(stream)
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			r.record(req)
			var rsp []byte
			if err := conn.Invoke(stream.Context(), method, &req, &rsp, grpc.WaitForReady(true)); err != nil {
				return err
			}
			return stream.SendMsg(&rsp)
		}))
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
	})
	return r
}

// record notes a request: its size, and the names of the required
// resources it carries (field 8 of a RunFunctionRequest, a map whose
// entries key their name as field 1).
func (r *recorder) record(req []byte) {
	c := recordedCall{at: time.Now(), bytes: len(req)}
	for b := req; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			break
		}
		if num == 8 && typ == protowire.BytesType {
			entry, _ := protowire.ConsumeBytes(b)
			for e := entry; len(e) > 0; {
				enum, etyp, en := protowire.ConsumeTag(e)
				if en < 0 {
					break
				}
				e = e[en:]
				em := protowire.ConsumeFieldValue(enum, etyp, e)
				if em < 0 {
					break
				}
				if enum == 1 && etyp == protowire.BytesType {
					key, _ := protowire.ConsumeBytes(e)
					c.required = append(c.required, string(key))
				}
				e = e[em:]
			}
		}
		b = b[m:]
	}
	slices.Sort(c.required)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// since are the calls recorded after t.
func (r *recorder) since(t time.Time) []recordedCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recordedCall
	for _, c := range r.calls {
		if c.at.After(t) {
			out = append(out, c)
		}
	}
	return out
}
