package lockcycle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Row is one client's line of the table.
type Row struct {
	// Coordinator is the server (Redis, etcd, ...); Client the issuer
	// or the peer that took the locks.
	Coordinator, Client string
	// Learns says how a waiter learns that the subject is free: push,
	// or poll at its period.
	Learns string
	Result Result
}

// Table returns rows as a markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	goroutines := 32
	if len(rows) > 0 {
		goroutines = rows[0].Result.Goroutines
	}
	fmt.Fprintf(&b, "| coordinator | client | cycle p50 | cycle p99 (1 goroutine; cycles) | cycles/s at %d goroutines | hand-over p50 | hand-over max | how the waiter learns |\n", goroutines)
	b.WriteString("|---|---|--:|--:|--:|--:|--:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s (%s) | %s | %s | %s | %s |\n", r.Coordinator, r.Client,
			Duration(r.Result.CycleP50), Duration(r.Result.CycleP99), Count(r.Result.Cycles), PerSecond(r.Result.PerSecond),
			Duration(r.Result.HandOverP50), Duration(r.Result.HandOverMax), r.Learns)
	}
	return b.String()
}

// Duration writes d with three significant digits, in µs below a
// millisecond, in ms below a second: 412 µs, 1.23 ms, 250 ms, 3.05 s.
func Duration(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return sig3(float64(d)/float64(time.Microsecond)) + " µs"
	case d < time.Second:
		return sig3(float64(d)/float64(time.Millisecond)) + " ms"
	}
	return sig3(d.Seconds()) + " s"
}

// sig3 writes v (≥ 0) with three significant digits, or as a whole number
// when it has more digits than that before the point.
func sig3(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// PerSecond writes a rate as a whole number with thousands separated by a
// comma, or with three significant digits below 100.
func PerSecond(v float64) string {
	if v <= 0 {
		return "–"
	}
	if v < 100 {
		return sig3(v)
	}
	return thousands(strconv.FormatFloat(v, 'f', 0, 64))
}

// Count writes n with thousands separated by a comma.
func Count(n int) string { return thousands(strconv.Itoa(n)) }

// thousands separates the thousands of the digits s by commas.
func thousands(s string) string {
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// The markers of the section in the document; Replace rewrites what lies
// between them.
const (
	Begin = "<!-- lockcycle: begin; written by make bench-lock -->"
	End   = "<!-- lockcycle: end -->"
)

// Replace returns doc with what lies between Begin and End replaced by
// body, or, in a doc without them, with heading, the markers and body
// added at its end.
func Replace(doc, heading, body string) string {
	body = strings.TrimRight(body, "\n") + "\n"
	i := strings.Index(doc, Begin)
	j := strings.Index(doc, End)
	if i >= 0 && j > i {
		return doc[:i+len(Begin)] + "\n" + body + doc[j:]
	}
	if doc != "" {
		doc = strings.TrimRight(doc, "\n") + "\n\n"
	}
	return doc + heading + "\n\n" + Begin + "\n" + body + End + "\n"
}
