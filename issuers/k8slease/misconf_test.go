package k8slease_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/zukhruf/lease/issuers/k8slease"
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest"
)

// lockGuard bounds the wait for a Lock that must fail at once: a guard
// against a hang with context.Background(), not a measure. The time each
// one took is logged.
const lockGuard = 30 * time.Second

// counter counts the requests a clientset sends, by verb (GET, WATCH,
// CREATE, UPDATE) and by verb and answer ("WATCH 403"; "WATCH error" if
// none came).
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

// wrap is a rest.Config.WrapTransport that counts into c.
func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		verb := map[string]string{http.MethodPost: "CREATE", http.MethodPut: "UPDATE", http.MethodDelete: "DELETE"}[req.Method]
		if verb == "" {
			verb = req.Method
			if req.URL.Query().Get("watch") == "true" {
				verb = "WATCH"
			}
		}
		resp, err := rt.RoundTrip(req)
		answer := "error"
		if err == nil {
			answer = strings.Fields(resp.Status)[0]
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n == nil {
			c.n = make(map[string]int)
		}
		c.n[verb]++
		c.n[verb+" "+answer]++
		c.n["all"]++
		return resp, err
	})
}

// take returns the counts so far and starts again from zero.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	if n == nil {
		n = map[string]int{}
	}
	return n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// counted returns a clientset of cfg whose requests c counts.
func counted(t testing.TB, cfg *rest.Config, c *counter) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = c.wrap
	return clientset(t, cfg)
}

// lockAtOnce runs cfg.Lock with context.Background(), logs how long it took,
// and returns its error; it fails the test if Lock succeeds or does not
// return within lockGuard.
func lockAtOnce(t *testing.T, cfg k8slease.Config, cs kubernetes.Interface, namespace, name, identity string) error {
	t.Helper()
	start := time.Now()
	c := make(chan granted, 1)
	go func() {
		l, err := cfg.Lock(context.Background(), cs, namespace, name, identity)
		c <- granted{l, err, time.Now()}
	}()
	select {
	case g := <-c:
		took := g.at.Sub(start)
		if g.err == nil {
			g.l.Unlock(context.Background())
			t.Fatalf("Lock = a lease, want an error")
		}
		t.Logf("Lock returned in %v: %v", took.Round(time.Millisecond), g.err)
		return g.err
	case <-time.After(lockGuard):
		t.Fatalf("Lock with context.Background() did not return within %v", lockGuard)
		return nil
	}
}

// restricted returns the configuration of a user of s whose Role in ns
// grants verbs on leases, and a func that grants other verbs instead.
func restricted(t *testing.T, s *kubetest.Server, verbs ...string) (*rest.Config, func(verbs ...string)) {
	t.Helper()
	return s.Restricted(t, ns, verbs...)
}

// TestLockRefusesMistakes passes Lock each mistake a caller can make in its
// arguments and Config: each is refused with context.Background(), before
// any request, with an error that names it.
func TestLockRefusesMistakes(t *testing.T) {
	var cnt counter
	cs := counted(t, shared.Config(), &cnt)
	long := strings.Repeat("x", 1<<20)
	tests := []struct {
		name                string
		cfg                 k8slease.Config
		ns, lease, identity string
		want                string
	}{
		{"name ..", short, ns, "..", "a", `name ".." is not a valid Lease name`},
		{"name a/b", short, ns, "a/b", "a", `name "a/b" is not a valid Lease name`},
		{"name with capitals", short, ns, "Orders", "a", `name "Orders" is not a valid Lease name`},
		{"name of 254 bytes", short, ns, strings.Repeat("a", 254), "a", "must be no more than 253 characters"},
		{"name of a megabyte", short, ns, long, "a", "(1048576 bytes)"},
		{"empty name", short, ns, "", "a", `name "" is not a valid Lease name`},
		{"namespace a.b", short, "a.b", "x", "a", `namespace "a.b" is not a valid namespace name`},
		{"empty namespace", short, "", "x", "a", `namespace "" is not a valid namespace name`},
		{"empty identity", short, ns, "x", "", "empty identity"},
		{"identity over 1024 bytes", short, ns, "x", long, "is 1048576 bytes long, longer than 1024"},
		{"identity not UTF-8", short, ns, "x", "a\xff", "not valid UTF-8"},
		{"lease duration under 2 s", k8slease.Config{LeaseDuration: time.Second}, ns, "x", "a", "lease duration 1s is shorter than 2s"},
		{"lease duration 2^32+15 s", k8slease.Config{LeaseDuration: (1<<32 + 15) * time.Second}, ns, "x", "a", "is longer than 1h0m0s"},
		{"lease duration 2^31 s", k8slease.Config{LeaseDuration: (1 << 31) * time.Second}, ns, "x", "a", "is longer than 1h0m0s"},
		{"renew period 1 ms", k8slease.Config{RenewPeriod: time.Millisecond}, ns, "x", "a", "renew period 1ms is shorter than 1s"},
		{"renew period leaves no round trip", k8slease.Config{LeaseDuration: 4 * time.Second, RenewPeriod: 3 * time.Second}, ns, "x", "a", "less than a quarter of the lease duration"},
		{"retry period 1 ns", k8slease.Config{RetryPeriod: time.Nanosecond}, ns, "x", "a", "retry period 1ns is shorter than 1s"},
		{"retry period over the lease duration", k8slease.Config{RetryPeriod: time.Minute}, ns, "x", "a", "retry period 1m0s is longer than the lease duration 15s"},
		{"margin 1 ns", k8slease.Config{Margin: time.Nanosecond}, ns, "x", "a", "margin 1ns is shorter than 25ms"},
		{"margin leaves no round trip", k8slease.Config{LeaseDuration: 2 * time.Second, Margin: 600 * time.Millisecond}, ns, "x", "a", "less than a quarter of the lease duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cnt.take()
			err := lockAtOnce(t, tt.cfg, cs, tt.ns, tt.lease, tt.identity)
			if !strings.HasPrefix(err.Error(), "k8slease: lock ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Lock = %v, want an error saying %q", err, tt.want)
			}
			if len(err.Error()) > 600 {
				t.Errorf("the error is %d bytes long: it quotes the caller's input whole", len(err.Error()))
			}
			if n := cnt.take(); n["all"] != 0 {
				t.Errorf("Lock sent %v, want no request", n)
			}
		})
	}
}

// TestLockNilClientset: an untyped nil, a typed nil and a zero clientset
// get the same error, not a panic.
func TestLockNilClientset(t *testing.T) {
	var want string
	for _, cs := range []kubernetes.Interface{nil, (*kubernetes.Clientset)(nil), &kubernetes.Clientset{}} {
		err := lockAtOnce(t, short, cs, ns, "x", "a")
		if want == "" {
			want = err.Error()
		}
		if err.Error() != want || !strings.Contains(want, "nil clientset") {
			t.Errorf("Lock with %T = %v, want %q, as an untyped nil gets", cs, err, want)
		}
	}
}

func TestNilContextPanics(t *testing.T) {
	wantPanic := func(t *testing.T, want string, f func()) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), want) {
				t.Errorf("recover() = %v, want a panic saying %q", r, want)
			}
		}()
		f()
	}
	cs := clientset(t, shared.Config())
	wantPanic(t, "k8slease: Lock called with a nil context", func() {
		//lint:ignore SA1012 the misuse under test
		short.Lock(nil, cs, ns, leaseName(t), "a")
	})
	l := mustLock(t, short, cs, leaseName(t), "a")
	wantPanic(t, "k8slease: Unlock called with a nil context", func() {
		//lint:ignore SA1012 the misuse under test
		l.Unlock(nil)
	})
}

// TestLockBadClientConfig points Lock at the apiserver with a mistake in the
// client's configuration: each fails at once, wrapping the cause.
func TestLockBadClientConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nothing := ln.Addr().String()
	ln.Close()
	tests := []struct {
		name   string
		change func(*rest.Config)
		is     func(error) bool
	}{
		{"wrong token (401)", func(c *rest.Config) { c.BearerToken = "wrong" }, apierrors.IsUnauthorized},
		{"wrong CA", func(c *rest.Config) { c.CAData = otherCA(t) }, func(err error) bool {
			var ua x509.UnknownAuthorityError
			return errors.As(err, &ua)
		}},
		{"nothing listening", func(c *rest.Config) { c.Host = "https://" + nothing }, func(err error) bool {
			return errors.Is(err, syscall.ECONNREFUSED)
		}},
		{"an address that serves no leases", func(c *rest.Config) { c.Host += "/nope" }, func(err error) bool {
			return apierrors.IsNotFound(err) && strings.Contains(err.Error(), "serves no coordination.k8s.io/v1 leases")
		}},
		{"host name that does not resolve", func(c *rest.Config) {
			c.Host = "https://no-such-host.invalid:6443"
			c.Dial = nxdomain(t)
		}, func(err error) bool {
			var dns *net.DNSError
			return errors.As(err, &dns) && dns.IsNotFound
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := shared.Config()
			tt.change(cfg)
			var cnt counter
			err := lockAtOnce(t, short, counted(t, cfg, &cnt), ns, leaseName(t), "a")
			if !tt.is(err) {
				t.Errorf("Lock = %v, want one that wraps the cause", err)
			}
			if n := cnt.take(); n["all"] > 2 {
				t.Errorf("Lock sent %v, want a read and a watch at most", n)
			}
		})
	}
}

// nxdomain starts a DNS server on loopback that answers every query that
// the name does not exist (NXDOMAIN), and returns a dial func whose host
// names it alone resolves: the test needs no resolver of the machine's,
// which may be missing, slow or unreachable.
func nxdomain(t *testing.T) func(ctx context.Context, network, addr string) (net.Conn, error) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		pc.Close()
		<-done
	})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			// The query made its answer: QR, RD and RA set, RCODE 3
			// (NXDOMAIN), the question kept, no records.
			q := buf[:n]
			q[2] = 0x80 | q[2]&0x01
			q[3] = 0x80 | 3
			clear(q[6:12])
			pc.WriteTo(q, from) //nolint:errcheck // the resolver asks again or fails
		}
	}()
	server := pc.LocalAddr().String()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "udp", server)
	}}
	return (&net.Dialer{Resolver: r}).DialContext
}

// otherCA returns a self-signed certificate that signed nothing the
// apiserver has.
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "other-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestLockRefusedByRBAC runs Lock as a user whose Role lacks one of the
// verbs a candidate needs: each is refused at once with the apiserver's
// 403, and no Lease is taken.
func TestLockRefusedByRBAC(t *testing.T) {
	tests := []struct {
		name   string
		verbs  []string
		exists bool // the Lease exists, free, so that Lock must update it
		want   string
	}{
		{"no watch", []string{"get", "create", "update"}, false, `cannot watch resource "leases"`},
		{"no get", []string{"watch", "create", "update"}, false, `cannot get resource "leases"`},
		{"no create", []string{"get", "watch", "update"}, false, `cannot create resource "leases"`},
		{"no update", []string{"get", "watch", "create"}, true, `cannot update resource "leases"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := restricted(t, shared, tt.verbs...)
			admin := clientset(t, shared.Config())
			name := leaseName(t)
			if tt.exists {
				mustLock(t, short, admin, name, "before").Unlock(t.Context())
			}
			var cnt counter
			err := lockAtOnce(t, short, counted(t, cfg, &cnt), ns, name, "a")
			n := cnt.take()
			t.Logf("requests: %v", n)
			if n["all"] > 3 {
				t.Errorf("Lock sent %v, want a read, a watch and a write at most", n)
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "get, create, update and watch") {
				t.Errorf("Lock = %v, want a 403 saying %q and naming the verbs needed", err, tt.want)
			}
			cur, err := admin.CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) && !tt.exists:
			case err == nil && tt.exists && cur.Spec.HolderIdentity != nil && *cur.Spec.HolderIdentity == "":
			default:
				t.Errorf("after the refusal the Lease is %v, %v; want it as it was", cur, err)
			}
		})
	}
}

// TestWatchRefusedWhileHeld takes the watch permission away from a user
// holding leases on an apiserver that ends every watch after one to two
// seconds: each lease opens its watch again at most once each 2 s, keeps
// renewing, and sees a takeover at its next renewal.
func TestWatchRefusedWhileHeld(t *testing.T) {
	const leases, window = 5, 10 * time.Second
	s := kubetest.Options{MinRequestTimeout: time.Second}.Start(t)
	cfg, grant := restricted(t, s, "get", "create", "update", "watch")
	var cnt counter
	cs := counted(t, cfg, &cnt)
	names := make([]string, leases)
	held := make([]*k8slease.Lease, leases)
	for i := range held {
		names[i] = leaseName(t)
		held[i] = mustLock(t, short, cs, names[i], "a")
	}
	grant("get", "create", "update")
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if n := cnt.take(); n["WATCH 403"] > 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("no watch was refused within 30 s")
		}
	}
	time.Sleep(2 * time.Second) // each lease's watch ended and was refused
	cnt.take()
	time.Sleep(window)
	n := cnt.take()
	per := func(verb string) float64 { return float64(n[verb]) / leases / window.Seconds() }
	t.Logf("watch refused, %d leases of 2 s, %v: %v; per lease a second: %.2f refused watches, %.2f renewals, %.2f requests in all",
		leases, window, n, per("WATCH 403"), per("UPDATE"), per("all"))
	if per("WATCH") > 1 {
		t.Errorf("%.2f watches a second per lease while refused, want at most 1", per("WATCH"))
	}
	for i, l := range held {
		if err := l.Signal().Err(); err != nil {
			t.Fatalf("lease %d lost while its watch was refused: %v", i, err)
		}
	}
	edit(t, clientset(t, s.Config()), names[0], func(l *coordinationv1.Lease) { s := "operator"; l.Spec.HolderIdentity = &s })
	editedAt := time.Now()
	err := waitLost(t, held[0], 5*time.Second)
	t.Logf("an operator's overwrite seen in %v without a watch: %v", time.Since(editedAt).Round(time.Millisecond), err)
	if !isLost(err, k8slease.ErrTakenOver) {
		t.Errorf("Err() = %v, want ErrTakenOver", err)
	}
}

// TestLockNamespaceMissing runs Lock in a namespace that does not exist:
// it retries with a pause that doubles up to 2 s, a Lock cut by its
// context wraps both the context's error and the apiserver's 404, and a
// namespace made while Lock waits heals it.
func TestLockNamespaceMissing(t *testing.T) {
	t.Run("cut by its context", func(t *testing.T) {
		const wait = 6 * time.Second
		var cnt counter
		cs := counted(t, shared.Config(), &cnt)
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		_, err := short.Lock(ctx, cs, "no-such-namespace", leaseName(t), "a")
		n := cnt.take()
		t.Logf("Lock = %v; requests in %v: %v", err, wait, n)
		if !errors.Is(err, context.DeadlineExceeded) || !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `namespaces "no-such-namespace" not found`) {
			t.Errorf("Lock = %v, want context.DeadlineExceeded and the apiserver's 404 naming the namespace", err)
		}
		// Rounds at 0, 0.1, 0.3, 0.7, 1.5, 3.1 and 5.1 s: a read and a
		// create each, and the watch once.
		if n["all"] > 16 {
			t.Errorf("%d requests in %v, want at most 16", n["all"], wait)
		}
	})
	t.Run("made, then cut while another holds the Lease", func(t *testing.T) {
		// B's create is refused; its transport then holds its requests
		// until the namespace is made and A holds the Lease, so that B
		// finds A's record live and waits. Cut then, B's Lock reports
		// its context's error alone: the 404 was mended.
		admin := clientset(t, shared.Config())
		namespace := leaseName(t)
		refused, release, waiting := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once, twice sync.Once
		open := sync.OnceFunc(func() { close(release) })
		defer open() // a failed test leaves no request held
		var reads atomic.Int32
		cfg := shared.Config()
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				select {
				case <-refused:
					<-release
				default:
				}
				resp, err := rt.RoundTrip(req)
				switch {
				case err != nil:
				case req.Method == http.MethodPost && resp.StatusCode == http.StatusNotFound:
					once.Do(func() { close(refused) })
				case req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" && resp.StatusCode == http.StatusOK:
					// The second read that found the Lease comes after
					// the first round that found A live had ended.
					if reads.Add(1) == 2 {
						twice.Do(func() { close(waiting) })
					}
				}
				return resp, err
			})
		}
		b := clientset(t, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		c := make(chan granted, 1)
		go func() {
			l, err := short.Lock(ctx, b, namespace, "x", "b")
			c <- granted{l, err, time.Now()}
		}()
		select {
		case <-refused:
		case g := <-c:
			t.Fatalf("Lock = %v before its create was refused", g.err)
		}
		if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(t.Context(), time.Minute)
		defer acancel()
		a, err := short.Lock(actx, admin, namespace, "x", "a")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Unlock(context.Background())
		open()
		select {
		case <-waiting:
		case g := <-c:
			t.Fatalf("Lock = %v, %v while A held the Lease", g.l, g.err)
		}
		cancel()
		g := <-c
		if g.err == nil {
			g.l.Unlock(context.Background())
			t.Fatal("Lock = a lease while A held the Lease")
		}
		if !errors.Is(g.err, context.Canceled) || apierrors.IsNotFound(g.err) || strings.Contains(g.err.Error(), "not found") {
			t.Errorf("Lock = %v, want context.Canceled alone: the 404 was mended", g.err)
		}
	})
	t.Run("made while Lock waits", func(t *testing.T) {
		admin := clientset(t, shared.Config())
		namespace := leaseName(t)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		c := make(chan granted, 1)
		go func() {
			l, err := short.Lock(ctx, admin, namespace, "x", "a")
			c <- granted{l, err, time.Now()}
		}()
		time.Sleep(time.Second)
		if _, err := admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		g := <-c
		if g.err != nil {
			t.Fatalf("Lock = %v, want the lease once the namespace exists", g.err)
		}
		g.l.Unlock(context.Background())
	})
}

// TestLockRateLimit: a clientset of client-go's default rate limit, 5
// requests a second, sustains five leases of 15 s (a renewal each 2 s);
// the sixth is refused at once with what to set, and taken once a lease
// is released.
func TestLockRateLimit(t *testing.T) {
	cfg := shared.Config()
	cfg.QPS, cfg.Burst = 0, 0 // client-go's defaults: 5 and 10
	cs := clientset(t, cfg)
	var held []*k8slease.Lease
	for range 5 {
		held = append(held, mustLock(t, k8slease.Config{}, cs, leaseName(t), "a"))
	}
	err := lockAtOnce(t, k8slease.Config{}, cs, ns, leaseName(t), "a")
	if !strings.Contains(err.Error(), "rate limit, QPS 5, cannot sustain 6 leases") || !strings.Contains(err.Error(), "QPS to at least 6") {
		t.Errorf("the sixth Lock = %v, want a refusal naming the limit and the QPS needed", err)
	}
	held[0].Unlock(t.Context())
	mustLock(t, k8slease.Config{}, cs, leaseName(t), "a")

	t.Run("no client-side limit", func(t *testing.T) {
		cfg := shared.Config()
		cfg.QPS = -1
		cs := clientset(t, cfg)
		for range 6 {
			mustLock(t, k8slease.Config{}, cs, leaseName(t), "a")
		}
	})
	t.Run("a 2 s lease at 1 request a second", func(t *testing.T) {
		cfg := shared.Config()
		cfg.QPS, cfg.Burst = 1, 1
		err := lockAtOnce(t, short, clientset(t, cfg), ns, leaseName(t), "a")
		if !strings.Contains(err.Error(), "cannot sustain 1 lease:") {
			t.Errorf("Lock = %v, want a refusal", err)
		}
	})
}

// TestIdentityRefusedByTheApiserver shows why Lock bounds identities: a
// record whose identity is 2 MiB is refused by the apiserver's etcd client
// (500) and one of 4 MiB by the apiserver (413), only when written, and an
// identity that is not UTF-8 comes back to a client that speaks JSON with
// U+FFFD in place of the invalid byte, naming another holder.
func TestIdentityRefusedByTheApiserver(t *testing.T) {
	cfg := shared.Config()
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	cs := clientset(t, cfg)
	create := func(identity string) (*coordinationv1.Lease, error) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(t)}}
		l.Spec.HolderIdentity = &identity
		return cs.CoordinationV1().Leases(ns).Create(t.Context(), l, metav1.CreateOptions{})
	}
	for size, code := range map[int]int32{2 << 20: http.StatusInternalServerError, 4 << 20: http.StatusRequestEntityTooLarge} {
		_, err := create(strings.Repeat("x", size))
		var st apierrors.APIStatus
		if !errors.As(err, &st) || st.Status().Code != code {
			t.Errorf("a record with an identity of %d bytes: %.200v, want %d", size, err, code)
		}
	}
	got, err := create("a\xff")
	if err != nil {
		t.Fatal(err)
	}
	if h := *got.Spec.HolderIdentity; h != "a\uFFFD" {
		t.Errorf("identity %q came back as %q, want %q", "a\xff", h, "a\uFFFD")
	}
}

// TestSameIdentityWaits gives two candidates one identity: the second waits
// the first out as it would anyone, and is granted only once the first
// releases the Lease.
func TestSameIdentityWaits(t *testing.T) {
	name := leaseName(t)
	a := mustLock(t, short, clientset(t, shared.Config()), name, "same")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := lockAsync(ctx, short, clientset(t, shared.Config()), name, "same")
	select {
	case g := <-b:
		if g.err == nil {
			g.l.Unlock(context.Background())
		}
		t.Fatalf("the second candidate's Lock returned %v while the first held the lease", g.err)
	case <-a.Signal().Done():
		t.Fatalf("the first was lost: %v", a.Signal().Err())
	case <-time.After(3 * time.Second): // renewals of a 2 s lease
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	g := <-b
	if g.err != nil {
		t.Fatalf("the second candidate's Lock = %v after the release", g.err)
	}
	defer g.l.Unlock(context.Background())
	if g.l.Token() <= a.Token() {
		t.Errorf("the second's token %d is not larger than the first's %d", g.l.Token(), a.Token())
	}
}
