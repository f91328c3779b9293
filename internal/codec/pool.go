package codec

import (
	"runtime"
	"slices"
	"sync"
	"weak"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// maxIdleCopies is how many buffers the pool keeps between calls: one per
// concurrent call, as far as Crossplane calls concurrently at this size.
const maxIdleCopies = 2

// copyPool holds the buffers the codec copies requests into, recycled: at
// 10,000 replicas a request is 37 MiB, and a new buffer on every call cost
// 1.5 ms to allocate and zero on top of the 2.5 ms copy, and made the
// garbage collector run about once a call. A buffer is lent to the request
// decoded from it, and back when RunFunction is done with the request:
// nothing RunFunction returns or caches aliases it. It is safe for
// concurrent calls.
type copyPool struct {
	mu   sync.Mutex
	idle [][]byte
	lent map[weak.Pointer[fnv1.RunFunctionRequest]][]byte
}

func newCopyPool() *copyPool {
	return &copyPool{lent: map[weak.Pointer[fnv1.RunFunctionRequest]][]byte{}}
}

// get returns a buffer of n bytes: the smallest idle one that holds them,
// else a new one with room for a fleet that grows a little. Every request
// carries the whole fleet, so requests are about the same size until the
// fleet changes: an idle buffer over twice n is of a fleet since shrunk,
// and is dropped, its memory given back.
func (p *copyPool) get(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = slices.DeleteFunc(p.idle, func(b []byte) bool { return cap(b)/2 > n })
	best := -1
	for i, b := range p.idle {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.idle[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]byte, n, n+n/8)
	}
	b := p.idle[best]
	p.idle = slices.Delete(p.idle, best, best+1)
	return b[:n]
}

// put makes a buffer idle, keeping the maxIdleCopies given back last: a
// buffer of a fleet since grown ages out.
func (p *copyPool) put(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, b)
	if len(p.idle) > maxIdleCopies {
		p.idle = slices.Delete(p.idle, 0, len(p.idle)-maxIdleCopies)
	}
}

// lend records that req aliases b. Should RunFunction never see req (an
// interceptor refused the call), b goes to the garbage collector with it.
func (p *copyPool) lend(req *fnv1.RunFunctionRequest, b []byte) {
	key := weak.Make(req)
	p.mu.Lock()
	p.lent[key] = b
	p.mu.Unlock()
	runtime.AddCleanup(req, p.forget, key)
}

// take ends the loan of the buffer lent to req, if any, and returns it.
func (p *copyPool) take(req *fnv1.RunFunctionRequest) ([]byte, bool) {
	key := weak.Make(req)
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.lent[key]
	delete(p.lent, key)
	return b, ok
}

// idleBytes is what the pool holds between calls.
func (p *copyPool) idleBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, b := range p.idle {
		n += cap(b)
	}
	return n
}

// drain drops the idle buffers, as a new server has none.
func (p *copyPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = nil
}

// forget drops the record of a buffer lent to a request that is gone
// without being released; the buffer goes with it.
func (p *copyPool) forget(key weak.Pointer[fnv1.RunFunctionRequest]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lent, key)
}
