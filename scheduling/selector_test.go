package scheduling

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
)

func TestSelectorsBounded(t *testing.T) {
	// A cache as full as it gets starts over, and compiles on.
	s := NewSelectors()
	for i := range maxSelectors + 1 {
		if p, detail := s.compile(fmt.Sprintf("device.driver == %q", strconv.Itoa(i))); p == nil {
			t.Fatalf("compile(...) #%d: %s", i, detail)
		}
	}
	if n := len(s.compiled); n > maxSelectors {
		t.Errorf("compile(...) %d times: %d selectors cached, want at most %d", maxSelectors+1, n, maxSelectors)
	}
}

func TestSelectorsConcurrent(t *testing.T) {
	// Passes share the cache concurrently (run with -race).
	s := NewSelectors()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if p, detail := s.compile(fmt.Sprintf("device.driver == %q", strconv.Itoa(i%2))); p == nil {
				t.Errorf("compile(...): %s", detail)
			}
		})
	}
	wg.Wait()
}
