// Package faulttrial keeps the book of an issuer's fault trials: for each
// fault and each trial, whether holder A was lost, whether a waiting holder
// B was granted, the overlap between the two, and how long A took to learn;
// it checks each trial against what the fault must show and writes the
// figures as a Markdown table.
//
// The overlap is the time A's Done closed minus the time B was granted: a
// positive overlap is a time when two holders each believed they held the
// lease, which an issuer must never allow.
//
// A book may also keep a peer's figures beside A's: A′, a holder of the
// tool users have without the issuer (etcd's own Session, client-go's
// LeaderElector), run in the same trial through the same fault, with a
// waiting holder B′ of its own. The table sets them in columns beside A's;
// they are measured, never checked.
package faulttrial

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Want is what every trial of a fault must show.
type Want uint8

const (
	// NoOverlap: A is lost, and if B is granted, no later than B's grant.
	NoOverlap Want = iota
	// NoLoss: a benign fault; A is not lost and B is not granted.
	NoLoss
	// LossNeeded: A must be lost although B may never be granted, as when
	// only the server's replies are dropped: the server still hears A, but
	// A can no longer know it. Such a loss is a false loss by necessity; if
	// B is granted, the overlap must not be positive.
	LossNeeded
	// Raced: the server tells A and frees the claim for B in one step (a
	// deletion that etcd pushes to every watcher at once, a backend that
	// PostgreSQL terminates, a connection reset seen by both ends), so A's
	// loss and B's grant race and nothing A does can make it win. A must be
	// lost; a positive overlap is measured and reported (Table says in how
	// many trials and by how much), not a violation. Only fencing protects
	// the resource there.
	Raced
)

func (w Want) String() string {
	switch w {
	case NoOverlap:
		return "A lost no later than B's grant"
	case NoLoss:
		return "A not lost"
	case LossNeeded:
		return "A lost (false loss by necessity)"
	case Raced:
		return "A lost; its loss races B's grant"
	}
	return fmt.Sprintf("Want(%d)", uint8(w))
}

// A Fault is one row of the book: a name and what its trials must show.
type Fault struct {
	Name string
	Want Want
}

// A Trial is what one run of a fault showed.
type Trial struct {
	Lost      bool          // A's signal was lost
	Granted   bool          // B was granted
	Overlap   time.Duration // A's Done minus B's grant, when Lost and Granted
	Detection time.Duration // from the fault to A's Done, when Lost
	Cause     string        // A's error, when Lost

	// Peer is what A′ showed in the same run, when the book has a peer
	// (see [Book.Peer]); nil otherwise.
	Peer *Peer
}

// A Peer is what A′ showed in one trial: the book's peer, run beside A
// through the same fault, with its own waiting holder B′. Its figures are
// measured, never checked: an A′ still live after B′'s grant is what the
// table shows, not a violation.
type Peer struct {
	Lost      bool          // A′ was told it lost its claim
	Granted   bool          // B′ was granted
	Overlap   time.Duration // A′'s loss minus B′'s grant, when Lost and Granted
	Detection time.Duration // from the fault to A′'s loss, when Lost
	// Unrecorded, if not "", says why A′'s figures could not be recorded:
	// Check reports the trial.
	Unrecorded string
}

// late reports whether A′ was still live after B′ was granted: lost after
// the grant, or not lost by the end of the trial.
func (p *Peer) late() bool { return p.Granted && (!p.Lost || p.Overlap > 0) }

// falseLoss reports whether A was lost while nobody else was granted.
func (t Trial) falseLoss() bool { return t.Lost && !t.Granted }

// violation says what is wrong with t for want, or "" if nothing is.
func (t Trial) violation(want Want) string {
	switch {
	case want == NoLoss && t.Lost:
		return fmt.Sprintf("A was lost by a benign fault: %s", t.Cause)
	case want == NoLoss && t.Granted:
		return "B was granted during a benign fault"
	case !t.Lost && t.Granted:
		return "B was granted and A was never lost"
	case !t.Lost && want != NoLoss:
		return "A was never lost"
	case t.Granted && t.Overlap > 0 && want != Raced:
		return fmt.Sprintf("A was lost %v after B was granted (%s)", t.Overlap, t.Cause)
	}
	return ""
}

// peerViolation says why t lacks the figures of the peer named peer, or ""
// if it has them or the book has no peer.
func (t Trial) peerViolation(peer string) string {
	switch {
	case peer == "":
		return ""
	case t.Peer == nil:
		return "A′'s figures were not recorded"
	case t.Peer.Unrecorded != "":
		return "A′'s figures were not recorded: " + t.Peer.Unrecorded
	}
	return ""
}

// A Book records trials. Its zero value is an empty book without a peer,
// ready to use; it is safe for concurrent use.
type Book struct {
	// Peer, if not "", says what A′ is, for the line under the table: a
	// phrase such as "etcd's concurrency.Mutex on a concurrency.Session of
	// the same TTL". Every trial must then carry A′'s figures
	// ([Trial.Peer]): Check reports one that does not, and Table adds A′'s
	// columns. Set it before the first Add.
	Peer string

	mu     sync.Mutex
	faults []Fault // in the order first added
	trials map[string][]Trial
}

// Add records one trial of f. A fault's name names one row; adding it
// again with another Want panics, and so does adding a trial with a peer's
// figures to a book without a Peer.
func (b *Book) Add(f Fault, t Trial) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Peer == "" && t.Peer != nil {
		panic(fmt.Sprintf("faulttrial: Add called for %q with a peer's figures on a Book without a Peer", f.Name))
	}
	if b.trials == nil {
		b.trials = make(map[string][]Trial)
	}
	i := slices.IndexFunc(b.faults, func(g Fault) bool { return g.Name == f.Name })
	switch {
	case i < 0:
		b.faults = append(b.faults, f)
	case b.faults[i].Want != f.Want:
		panic(fmt.Sprintf("faulttrial: Add called for %q with %v, recorded before with %v", f.Name, f.Want, b.faults[i].Want))
	}
	b.trials[f.Name] = append(b.trials[f.Name], t)
}

// Check reports, through t.Errorf, every trial that does not show what its
// fault must, and, in a book with a peer, every trial without A′'s figures.
func (b *Book) Check(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range b.faults {
		for i, tr := range b.trials[f.Name] {
			for _, v := range []string{tr.violation(f.Want), tr.peerViolation(b.Peer)} {
				if v != "" {
					t.Errorf("%s, trial %d of %d: %s", f.Name, i+1, len(b.trials[f.Name]), v)
				}
			}
		}
	}
}

// Table returns the book as a Markdown table, one row a fault, followed by
// the machine and the command that made it. In a book with a peer, each of
// A's overlap and detection columns has A′'s beside it, and a line under
// the table says in how many trials A′ was still live after B′'s grant.
func (b *Book) Table(command string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var w bytes.Buffer
	if b.Peer == "" {
		w.WriteString("| fault | must hold | trials | A lost | B granted | overlap, max | overlap, median | detection, median | false losses | violations | A's cause (first trial lost) |\n")
		w.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	} else {
		w.WriteString("| fault | must hold | trials | A lost | B granted | A′ lost | B′ granted | A overlap, max | A′ overlap, max | A overlap, median | A′ overlap, median | A detection, median | A′ detection, median | A′ live after B′'s grant | A's false losses | violations | A's cause (first trial lost) |\n")
		w.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	}
	var races []string
	var peer peerSum
	for _, f := range b.faults {
		trials := b.trials[f.Name]
		var lost, granted, falseLosses, violations int
		var overlaps, detections []time.Duration
		var p peerSum
		cause := ""
		for _, t := range trials {
			if t.Lost {
				lost++
				detections = append(detections, t.Detection)
				if cause == "" {
					cause = t.Cause
				}
			}
			if t.Granted {
				granted++
				if t.Lost {
					overlaps = append(overlaps, t.Overlap)
				}
			}
			if t.falseLoss() {
				falseLosses++
			}
			if t.violation(f.Want) != "" || t.peerViolation(b.Peer) != "" {
				violations++
			}
			p.add(t.Peer)
		}
		if b.Peer == "" {
			fmt.Fprintf(&w, "| %s | %s | %d | %d | %d | %s | %s | %s | %d | %d | %s |\n",
				f.Name, f.Want, len(trials), lost, granted,
				maxOf(overlaps), median(overlaps), median(detections),
				falseLosses, violations, cell(cause))
		} else {
			fmt.Fprintf(&w, "| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %d | %d | %d | %s |\n",
				f.Name, f.Want, len(trials), lost, granted, p.lost, p.granted,
				maxOf(overlaps), maxOf(p.overlaps), median(overlaps), median(p.overlaps),
				median(detections), median(p.detections), p.late(),
				falseLosses, violations, cell(cause))
			peer.merge(p)
		}
		if f.Want == Raced {
			races = append(races, raceLine(f.Name, overlaps))
		}
	}
	for _, r := range races {
		w.WriteString("\n" + r + "\n")
	}
	if b.Peer != "" {
		w.WriteString("\n" + peer.line(b.Peer) + "\n")
	}
	fmt.Fprintf(&w, "\nMachine: %s. Command: `%s`, %s.\n", Machine(), command, time.Now().UTC().Format("2006-01-02"))
	return w.String()
}

// peerSum sums up A′'s figures over trials.
type peerSum struct {
	recorded, lost, granted int
	overlaps, detections    []time.Duration
	lateLost, neverLost     int           // trials A′ was live after B′'s grant: lost after it, never lost
	lateMost                time.Duration // the largest overlap of lateLost
}

func (s *peerSum) add(p *Peer) {
	if p == nil || p.Unrecorded != "" {
		return
	}
	s.recorded++
	if p.Lost {
		s.lost++
		s.detections = append(s.detections, p.Detection)
	}
	if p.Granted {
		s.granted++
		if p.Lost {
			s.overlaps = append(s.overlaps, p.Overlap)
		}
	}
	if p.late() {
		if p.Lost {
			s.lateLost++
			s.lateMost = max(s.lateMost, p.Overlap)
		} else {
			s.neverLost++
		}
	}
}

func (s *peerSum) merge(o peerSum) {
	s.recorded += o.recorded
	s.lost += o.lost
	s.granted += o.granted
	s.overlaps = append(s.overlaps, o.overlaps...)
	s.detections = append(s.detections, o.detections...)
	s.lateLost += o.lateLost
	s.neverLost += o.neverLost
	s.lateMost = max(s.lateMost, o.lateMost)
}

func (s *peerSum) late() int { return s.lateLost + s.neverLost }

// line says what A′ is and in how many trials it was still live after
// B′'s grant.
func (s *peerSum) line(peer string) string {
	l := fmt.Sprintf("A′ is %s, run beside A in each trial through the same fault, with a waiting holder B′ of its own; "+
		"its figures are measured, not checked. A′ was still live after B′'s grant in %d of the %d trials recorded (B′ was granted in %d)",
		peer, s.late(), s.recorded, s.granted)
	var parts []string
	if s.lateLost > 0 {
		parts = append(parts, fmt.Sprintf("lost after the grant in %d, by at most %.3f ms", s.lateLost, float64(s.lateMost)/float64(time.Millisecond)))
	}
	if s.neverLost > 0 {
		parts = append(parts, fmt.Sprintf("not lost by the end of the trial in %d", s.neverLost))
	}
	if len(parts) > 0 {
		l += ": " + strings.Join(parts, "; ")
	}
	return l + "."
}

// raceLine says in how many of a raced fault's trials A was lost after B's
// grant, and by how much at most.
func raceLine(name string, overlaps []time.Duration) string {
	var late []time.Duration
	for _, o := range overlaps {
		if o > 0 {
			late = append(late, o)
		}
	}
	if len(late) == 0 {
		return fmt.Sprintf("Race, %s: A was lost no later than B's grant in each of the %d trials where both happened.", name, len(overlaps))
	}
	return fmt.Sprintf("Race, %s: A was lost after B's grant in %d of %d trials, by at most %.3f ms.",
		name, len(late), len(overlaps), float64(slices.Max(late))/float64(time.Millisecond))
}

func maxOf(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	return ms(slices.Max(ds))
}

func median(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return ms(s[n/2])
	}
	return ms((s[n/2-1] + s[n/2]) / 2)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%+.0f ms", float64(d)/float64(time.Millisecond))
}

// cell makes s fit one table cell: one line, no pipe, at most 160 bytes.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// Machine names the machine the trials ran on: the processor, its cores,
// the system and the Go release.
func Machine() string {
	model := "unknown processor"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// WriteTable replaces the text between the lines "<!-- faults:begin -->"
// and "<!-- faults:end -->" of the file readme with table.
func WriteTable(readme, table string) error { return WriteSection(readme, "faults", table) }

// WriteSection replaces the text between the lines "<!-- name:begin -->"
// and "<!-- name:end -->" of the file readme with table, so that one README
// can hold several tables a test writes.
func WriteSection(readme, name, table string) error {
	b, err := os.ReadFile(readme)
	if err != nil {
		return fmt.Errorf("faulttrial: %w", err)
	}
	s := string(b)
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("faulttrial: %s has no %q line followed by a %q line", readme, begin, end)
	}
	s = s[:i+len(begin)] + "\n" + strings.TrimSpace(table) + "\n" + s[j:]
	if err := os.WriteFile(readme, []byte(s), 0o644); err != nil {
		return fmt.Errorf("faulttrial: %w", err)
	}
	return nil
}

// A Stamp records the time a channel closes.
type Stamp struct {
	once sync.Once
	stop chan struct{}
	done chan struct{}
	at   time.Time
	ok   bool
}

// StampWhen starts watching done, in a goroutine that returns when done
// closes or when [Stamp.Stop] is called.
func StampWhen(done <-chan struct{}) *Stamp {
	s := &Stamp{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		select {
		case <-done:
			s.at, s.ok = time.Now(), true
		case <-s.stop:
			// Both may have closed before this goroutine ran: the
			// time now is later than the close, never earlier.
			select {
			case <-done:
				s.at, s.ok = time.Now(), true
			default:
			}
		}
	}()
	return s
}

// Stop stops watching and returns the time the channel closed, with ok
// true, or ok false if it had not closed. Successive calls return the same
// values.
func (s *Stamp) Stop() (at time.Time, ok bool) {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return s.at, s.ok
}

// Concurrently calls run(0) through run(n-1), each in its own goroutine, with
// at most atOnce running at a time, and returns when every call has
// returned. Trials that each wait out a TTL run side by side this way, in a
// bound that keeps the machine's load, and so the trials' timings, honest.
// It panics if atOnce is less than 1.
func Concurrently(n, atOnce int, run func(i int)) {
	if atOnce < 1 {
		panic(fmt.Sprintf("faulttrial.Concurrently: atOnce = %d, want at least 1", atOnce))
	}
	sem := make(chan struct{}, atOnce)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run(i)
		})
	}
	wg.Wait()
}
