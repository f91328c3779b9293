// Package fnflags is the Crossplane function template's command line, which
// both of the project's composition functions (the function and the relay)
// serve with, and the checks both make of it before anything listens.
package fnflags

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/crossplane/function-sdk-go"
)

// Template is the function template's flags, embedded in each function's
// CLI (kong's `embed:""`).
type Template struct {
	Debug bool `help:"Emit debug logs in addition to info logs." short:"d"`

	Network     string `default:"tcp" help:"Network on which to listen for gRPC connections."`
	Address     string `default:":9443" help:"Address at which to listen for gRPC connections."`
	TLSCertsDir string `env:"TLS_SERVER_CERTS_DIR" help:"Directory containing server certs (tls.key, tls.crt) and the CA used to verify client certificates (ca.crt)." name:"tls-server-certs-dir"`
	Insecure    bool   `help:"Run without mTLS credentials. If you supply this flag --tls-server-certs-dir will be ignored."`

	MetricsAddress string `default:":8080" help:"Address at which to serve Prometheus metrics; empty serves none."`
}

// Check returns an error for each bad flag, naming it: an address nothing
// could listen at, metrics on the gRPC port, or mTLS without the key pair
// and CA that Crossplane's package manager writes.
func (t Template) Check() []error {
	var errs []error
	bad := func(flag string, v any, why string) {
		errs = append(errs, Invalid(flag, v, why))
	}
	switch t.Network {
	case "tcp", "tcp4", "tcp6":
		if err := checkHostPort(t.Address); err != nil {
			bad("address", t.Address, err.Error())
		}
	case "unix":
		if t.Address == "" {
			bad("address", t.Address, "must be a socket path for --network unix")
		}
	default:
		bad("network", t.Network, "must be tcp, tcp4, tcp6 or unix")
	}
	if t.MetricsAddress != "" {
		if err := checkHostPort(t.MetricsAddress); err != nil {
			bad("metrics-address", t.MetricsAddress, err.Error())
		} else if t.Network != "unix" && samePort(t.Address, t.MetricsAddress) {
			bad("metrics-address", t.MetricsAddress, "must not be --address's port: one of the two servers could not listen")
		}
	}
	switch {
	case t.Insecure:
	case t.TLSCertsDir == "":
		errs = append(errs, errors.New("--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) is required without --insecure"))
	default:
		// Loaded here as serving loads them, so that a directory without a
		// key pair and CA is refused before anything listens.
		if err := function.MTLSCertificates(t.TLSCertsDir)(&function.ServeOptions{}); err != nil {
			bad("tls-server-certs-dir", t.TLSCertsDir, err.Error()+" (it must hold tls.crt, tls.key and ca.crt)")
		}
	}
	return errs
}

// Invalid is the error for one bad flag: its name, its value, and why.
func Invalid(flag string, v any, why string) error {
	return fmt.Errorf("invalid --%s %q: %s", flag, fmt.Sprint(v), why)
}

// checkHostPort is nil for a host:port to listen at: any host or none,
// and a port number (0 for any free port).
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("must be host:port, or :port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("port %q must be a number from 0 to 65535", port)
	}
	return nil
}

// samePort is whether two host:port addresses name one fixed port, so
// that the second to listen could not.
func samePort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	return ha == hb || ha == "" || hb == ""
}
