package natstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// routeOffset is how far above its client port a server listens for the
// other servers of its cluster.
const routeOffset = 10000

// The ports of this package's servers, and the route port above each, lie
// below the kernel's ephemeral range, which a listener on port 0 (a
// faultnet proxy) is never given. A port is reserved from a server's start
// to its Close: in this process by a set, across processes by a lock on the
// port's byte of a file every process of the user shares, which the kernel
// drops when the process ends. So a port freed by a Kill is not taken by
// another test while the server may start there again.
var ports struct {
	mu   sync.Mutex
	file *os.File
	held map[int]bool
}

// reservePort reserves a port and the route port above it.
func reservePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.file == nil {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("natstest-ports-%d", os.Getuid())), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, fmt.Errorf("natstest: the ports' lock file: %w", err)
		}
		ports.file, ports.held = f, map[int]bool{}
	}
	lo, hi := portRange()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if reserve(p) {
			if reserve(p + routeOffset) {
				return p, nil
			}
			unreserve(p)
		}
	}
	return 0, errors.New("natstest: no free port in 1000 tries")
}

func reserve(p int) bool {
	if ports.held[p] || !lockPort(p, syscall.F_WRLCK) {
		return false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		lockPort(p, syscall.F_UNLCK)
		return false
	}
	ln.Close()
	ports.held[p] = true
	return true
}

func unreserve(p int) {
	delete(ports.held, p)
	lockPort(p, syscall.F_UNLCK)
}

// releasePort gives up a port reservePort returned, and its route port.
func releasePort(p int) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	unreserve(p)
	unreserve(p + routeOffset)
}

func lockPort(p int, typ int16) bool {
	lk := syscall.Flock_t{Type: typ, Whence: 0, Start: int64(p), Len: 1}
	return syscall.FcntlFlock(ports.file.Fd(), syscall.F_SETLK, &lk) == nil
}

// portRange returns the ports [lo, hi) servers take: from 10000 up to the
// start of the kernel's ephemeral range less the route offset.
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n-routeOffset > lo+1000 {
				hi = n
			}
		}
	}
	return lo, hi - routeOffset
}
