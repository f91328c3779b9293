package harness

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStatCPU(t *testing.T) {
	cases := map[string]struct {
		reason  string
		stat    string
		want    float64
		wantErr bool
	}{
		"Plain": {
			reason: "utime 250 and stime 50 ticks are 3 s.",
			stat:   "42 (crossplane) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 200",
			want:   3,
		},
		"NameWithSpacesAndParentheses": {
			reason: "The command name may hold spaces and a closing parenthesis: fields count from the last.",
			stat:   "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 12 0 100 1000 200",
			want:   0.1,
		},
		"Truncated": {
			reason:  "A stat without the time fields is an error, not zero.",
			stat:    "42 (x) S 1 42",
			wantErr: true,
		},
		"NoName": {
			reason:  "A stat without a command name is an error.",
			stat:    "garbage",
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := statCPU(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s\nstatCPU(...): error %v, want error %t", tc.reason, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nstatCPU(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestStatusFields(t *testing.T) {
	status := "Name:\tcrossplane\nPPid:\t1\nNSpid:\t4242\t7\nVmHWM:\t  234567 kB\nVmRSS:\t  123456 kB\n"
	host, inner, err := nsPIDs(status)
	if err != nil || host != 4242 || inner != 7 {
		t.Errorf("nsPIDs(...) = %d, %d, %v, want 4242, 7, nil", host, inner, err)
	}
	if rss, err := statusKB(status, "VmRSS"); err != nil || rss != 123456<<10 {
		t.Errorf("statusKB(..., VmRSS) = %d, %v, want %d, nil", rss, err, 123456<<10)
	}
	if peak, err := statusKB(status, "VmHWM"); err != nil || peak != 234567<<10 {
		t.Errorf("statusKB(..., VmHWM) = %d, %v, want %d, nil", peak, err, 234567<<10)
	}
	if _, _, err := nsPIDs("Name:\tx\n"); err == nil {
		t.Error("nsPIDs of a status without NSpid: no error")
	}
	if _, err := statusKB("Name:\tx\n", "VmRSS"); err == nil {
		t.Error("statusKB of a status without VmRSS: no error")
	}
}

// TestUsageOfAChild reads a busy child's CPU time and memory from /proc,
// in or out of the suites' namespaces.
func TestUsageOfAChild(t *testing.T) {
	p := StartProcess(t, t.TempDir(), "busy", "/bin/sh", nil, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 30")
	var u Usage
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if u, err = p.Usage(); err != nil {
			t.Fatal(err)
		}
		if u.CPU >= 0.2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if u.CPU < 0.2 {
		t.Errorf("a shell counting to 300,000 used %.2fs of CPU in 30s, want 0.2s at least", u.CPU)
	}
	if u.RSS <= 0 || u.Peak < u.RSS {
		t.Errorf("its RSS is %d and its peak %d, want more than none, the peak at least the RSS", u.RSS, u.Peak)
	}
}
