package redislease

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadValueRefusesHostileLengths feeds readValue the replies a broken or
// hostile server could send: each must be an error that fails the
// connection, never a panic or an allocation as large as the server says,
// both of which would end the process from the connection's reader.
func TestReadValueRefusesHostileLengths(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"bulk length overflowing int", "$9223372036854775807\r\n"},
		{"bulk length beyond proto-max-bulk-len", "$1099511627776\r\n"},
		{"blob error length overflowing int", "!9223372036854775807\r\n"},
		{"array length beyond memory", "*1099511627776\r\n"},
		{"map length overflowing int when doubled", "%4611686018427387904\r\n"},
		{"push length beyond memory", ">1099511627776\r\n"},
		{"nesting deeper than any reply", strings.Repeat("*1\r\n", 100000) + ":1\r\n"},
		{"attributes in a row without end", strings.Repeat("|0\r\n", 100000) + ":1\r\n"},
		{"line one byte longer than maxLine", "+" + strings.Repeat("x", maxLine) + "\r\n"},
		{"integer out of range", ":9223372036854775808\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, _, err := readValue(bufio.NewReader(strings.NewReader(tt.in)))
			if err == nil {
				t.Fatalf("readValue(%.20q…) = %v, nil, want an error", tt.in, v)
			}
		})
	}
}

// TestReadValueReadsReplies pins the replies the lease reads, so that the
// limits above refuse nothing a server sends.
func TestReadValueReadsReplies(t *testing.T) {
	tests := []struct {
		name, in string
		push     bool
	}{
		{"simple string", "+OK\r\n", false},
		{"bulk", "$3\r\nabc\r\n", false},
		{"null bulk", "$-1\r\n", false},
		{"ROLE of a primary", "*3\r\n$6\r\nmaster\r\n:10\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n$2\r\n10\r\n", false},
		{"HELLO map", "%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$4\r\nrole\r\n$6\r\nmaster\r\n", false},
		{"invalidate push", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", true},
		{"invalidate push of a flush", ">2\r\n$10\r\ninvalidate\r\n_\r\n", true},
		{"error longer than the reader's buffer", "-ERR " + strings.Repeat("x", 5000) + "\r\n", false},
		{"simple string of maxLine bytes", "+" + strings.Repeat("x", maxLine-1) + "\r\n", false},
		{"value after an attribute", "|1\r\n+key-popularity\r\n%0\r\n:1\r\n", false},
		{"blob error", "!21\r\nSYNTAX invalid syntax\r\n", false},
		{"verbatim string", "=15\r\ntxt:Some string\r\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, push, err := readValue(bufio.NewReader(strings.NewReader(tt.in)))
			if err != nil || push != tt.push {
				t.Fatalf("readValue(%.80q) = _, %v, %v, want _, %v, nil", tt.in, push, err, tt.push)
			}
			// A reply may arrive in pieces, each of which refills the
			// reader's buffer over the lines already read from it.
			v1, push1, err := readValue(bufio.NewReader(iotest.OneByteReader(strings.NewReader(tt.in))))
			if err != nil || push1 != push || !reflect.DeepEqual(v1, v) {
				t.Fatalf("readValue(%.80q a byte at a time) = %.80v, %v, %v, want %.80v, %v, nil", tt.in, v1, push1, err, v, push)
			}
		})
	}
}

// endless is a server that sends one line without end.
type endless struct{ n int }

func (r *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	r.n += len(p)
	return len(p), nil
}

// TestReadValueRefusesEndlessLine checks that a line that never ends is
// refused once it passes maxLine, having read little more than that.
func TestReadValueRefusesEndlessLine(t *testing.T) {
	r := &endless{}
	rd := bufio.NewReader(io.MultiReader(strings.NewReader("-"), r))
	v, _, err := readValue(rd)
	if err == nil {
		t.Fatalf("readValue(an endless line) = %v, nil, want an error", v)
	}
	if max := maxLine + 2*rd.Size(); r.n > max {
		t.Errorf("readValue(an endless line) read %d bytes, want at most %d", r.n, max)
	}
}

// TestReadValueAllocatesWhatArrives checks that a string's declared length
// alone does not make readValue allocate it: a server that declares
// maxBulk and sends three bytes costs what it sent.
func TestReadValueAllocatesWhatArrives(t *testing.T) {
	in := fmt.Sprintf("$%d\r\nabc", maxBulk)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v, _, err := readValue(bufio.NewReader(strings.NewReader(in)))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("readValue(%q) = %v, nil, want an error", in, v)
	}
	if got, max := after.TotalAlloc-before.TotalAlloc, uint64(1<<20); got > max {
		t.Errorf("readValue(%q) allocated %d bytes, want at most %d", in, got, max)
	}
}

// FuzzReadValue checks readValue on two readings of the fuzzer's bytes.
//
// As a server's bytes: readValue returns a value or an error, never both
// and never a panic; a value read from the first n bytes is read again from
// those n bytes alone, is not read from the n-1 before its last, and,
// written again by the test's encoder, reads back the same.
//
// As choices: the bytes draw a value of every RESP3 type (nested, with
// attributes, with lines longer than the reader's buffer, with lines past
// maxLine and declared lengths past the limits), which the test encodes;
// readValue reads back the value drawn and stops at the end of its
// encoding, or refuses it if it passes a limit.
//
// A choice that is a RESP3 type's byte draws that type, so that the seeds,
// written as a server would, draw the types they are.
func FuzzReadValue(f *testing.F) {
	for _, s := range []string{
		"L\x00", // a line of maxLine-64 bytes
		"L\x40", // of exactly maxLine
		"L\x41", // of one byte more
		"H",     // a string declared longer than maxBulk
		"H\x03", // an array declared longer than maxAggregate
		"+OK\r\n",
		"-ERR unknown command 'FOO'\r\n",
		":-9223372036854775808\r\n",
		"_\r\n",
		"$-1\r\n",
		"*-1\r\n",
		",3.14\r\n",
		",-inf\r\n",
		"#t\r\n",
		"#f\r\n",
		"(3492890328409238509324850943850943825024385\r\n",
		"$5\r\nhe\r\no\r\n",
		"!21\r\nSYNTAX invalid syntax\r\n",
		"=15\r\ntxt:Some string\r\n",
		"*3\r\n:1\r\n+two\r\n$5\r\nthree\r\n",
		"~2\r\n+a\r\n+b\r\n",
		"%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n",
		">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n",
		"|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.19\r\n$1\r\nb\r\n,0.54\r\n*1\r\n:2\r\n",
		"*3\r\n$6\r\nmaster\r\n:10\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n$2\r\n10\r\n",
		strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n",
		"$9223372036854775807\r\n",
		"*1099511627776\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data)
		checkDrawn(t, data)
	})
}

// checkRead reads data as a server's bytes.
func checkRead(t *testing.T, data []byte) {
	t.Helper()
	br := bytes.NewReader(data)
	rd := bufio.NewReaderSize(br, 16)
	v, push, err := readValue(rd)
	if err != nil {
		if v != nil || push {
			t.Fatalf("readValue(%q) = %#v, %v, %v, want nil, false with an error", data, v, push, err)
		}
		return
	}
	if err := checkModel(v); err != nil {
		t.Fatalf("readValue(%q) = %#v: %v", data, v, err)
	}
	if _, ok := v.([]any); push && !ok {
		t.Fatalf("readValue(%q) = %#v, true, want a push to be a list", data, v)
	}
	n := len(data) - br.Len() - rd.Buffered()
	if v2, push2, err := readValue(bufio.NewReader(bytes.NewReader(data[:n]))); err != nil || push2 != push || !reflect.DeepEqual(v2, v) {
		t.Fatalf("readValue(%q) = %#v, %v, %v, want %#v, %v, nil as from the %d bytes that follow", data[:n], v2, push2, err, v, push, len(data)-n)
	}
	if v2, _, err := readValue(bufio.NewReader(bytes.NewReader(data[:n-1]))); err == nil {
		t.Fatalf("readValue(%q) = %#v, nil, want an error for a reply cut short", data[:n-1], v2)
	}
	var b bytes.Buffer
	encode(&b, v, push)
	if v2, push2, err := readValue(bufio.NewReader(&b)); err != nil || push2 != push || !reflect.DeepEqual(v2, v) {
		t.Fatalf("readValue(encode(%#v)) = %#v, %v, %v, want %#v, %v, nil", v, v2, push2, err, v, push)
	}
}

// checkModel reports a value of a type readValue does not return.
func checkModel(v any) error {
	switch v := v.(type) {
	case nil, string, int64, bool, *serverError:
		return nil
	case []any:
		for _, e := range v {
			if err := checkModel(e); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("a value of type %T", v)
}

// encode writes v as readValue returns it: strings as bulk strings, errors
// as blob errors, lists as arrays, or as a push if push is set.
func encode(b *bytes.Buffer, v any, push bool) {
	switch v := v.(type) {
	case nil:
		b.WriteString("_\r\n")
	case string:
		fmt.Fprintf(b, "$%d\r\n%s\r\n", len(v), v)
	case int64:
		fmt.Fprintf(b, ":%d\r\n", v)
	case bool:
		if v {
			b.WriteString("#t\r\n")
		} else {
			b.WriteString("#f\r\n")
		}
	case *serverError:
		fmt.Fprintf(b, "!%d\r\n%s\r\n", len(v.msg), v.msg)
	case []any:
		kind := byte('*')
		if push {
			kind = '>'
		}
		fmt.Fprintf(b, "%c%d\r\n", kind, len(v))
		for _, e := range v {
			encode(b, e, false)
		}
	}
}

// checkDrawn reads a value drawn from data, written by the test's encoder,
// and a frame after it.
func checkDrawn(t *testing.T, data []byte) {
	t.Helper()
	c := &choices{b: data}
	var b bytes.Buffer
	want, push, refused := draw(c, &b, 0)
	wire := b.Bytes()
	b.WriteString(":7\r\n")
	size := 4096
	if c.byte()%2 == 0 {
		size = 16 // the smallest bufio allows: most lines are longer
	}
	rd := bufio.NewReaderSize(&b, size)
	v, gotPush, err := readValue(rd)
	if refused {
		if err == nil {
			t.Fatalf("readValue(%.200q…) = %#v, nil, want an error for a limit passed", wire, v)
		}
		return
	}
	if err != nil || gotPush != push || !reflect.DeepEqual(v, want) {
		t.Fatalf("readValue(%.200q…) = %#v, %v, %v, want %#v, %v, nil", wire, v, gotPush, err, want, push)
	}
	if v, _, err := readValue(rd); err != nil || v != int64(7) {
		t.Fatalf("readValue after %.200q… = %#v, %v, want 7, nil: the first read did not stop at its end", wire, v, err)
	}
}

// choices hands out the fuzzer's bytes as choices, and zeros past their end,
// which draw leaves: every draw ends.
type choices struct{ b []byte }

func (c *choices) byte() byte {
	if len(c.b) == 0 {
		return 0
	}
	x := c.b[0]
	c.b = c.b[1:]
	return x
}

func (c *choices) uint64() uint64 {
	var x uint64
	for range 8 {
		x = x<<8 | uint64(c.byte())
	}
	return x
}

// bytes returns up to n bytes, fewer past the end.
func (c *choices) bytes(n int) []byte {
	n = min(n, len(c.b))
	x := c.b[:n]
	c.b = c.b[n:]
	return x
}

// line returns a short text without LF, as a line can hold.
func (c *choices) line() string {
	return strings.ReplaceAll(string(c.bytes(int(c.byte()%64))), "\n", " ")
}

// kinds are the types draw writes: RESP3's, then 'L' for a line near maxLine
// and 'H' for a declared length past the limits, drawn only by their own
// byte, since a line near maxLine costs a thousand short values.
const kinds = "+-:_,#($!=*~%>|LH"

// draw writes a value drawn from c at depth aggregates deep to b, and
// returns the value readValue should read and its push flag, or refused if
// it should refuse the value.
func draw(c *choices, b *bytes.Buffer, depth int) (want any, push, refused bool) {
	if depth > maxDepth {
		refused = true
	}
	k := c.byte()
	if strings.IndexByte(kinds, k) < 0 {
		k = kinds[int(k)%(len(kinds)-2)]
	}
	switch k {
	case '+':
		s := c.line()
		fmt.Fprintf(b, "+%s\r\n", s)
		return s, false, refused
	case '-':
		s := c.line()
		fmt.Fprintf(b, "-%s\r\n", s)
		return &serverError{msg: s}, false, refused
	case ':':
		n := int64(c.uint64())
		fmt.Fprintf(b, ":%d\r\n", n)
		return n, false, refused
	case '_':
		b.WriteString([]string{"_\r\n", "$-1\r\n", "*-1\r\n", "%-1\r\n"}[c.byte()%4])
		return nil, false, refused
	case ',':
		x := math.Float64frombits(c.uint64())
		var s string
		switch {
		case math.IsInf(x, 1):
			s = "inf"
		case math.IsInf(x, -1):
			s = "-inf"
		case math.IsNaN(x):
			s = "nan"
		default:
			s = strconv.FormatFloat(x, 'g', -1, 64)
		}
		fmt.Fprintf(b, ",%s\r\n", s)
		return s, false, refused
	case '#':
		t := c.byte()%2 == 0
		if t {
			b.WriteString("#t\r\n")
		} else {
			b.WriteString("#f\r\n")
		}
		return t, false, refused
	case '(':
		d := []byte{'1'}
		if c.byte()%2 == 0 {
			d = []byte{'-', '1'}
		}
		for _, x := range c.bytes(int(c.byte() % 64)) {
			d = append(d, '0'+x%10)
		}
		fmt.Fprintf(b, "(%s\r\n", d)
		return string(d), false, refused
	case '$', '!':
		s := string(c.bytes(int(c.byte())))
		fmt.Fprintf(b, "%c%d\r\n%s\r\n", k, len(s), s)
		if k == '!' {
			return &serverError{msg: s}, false, refused
		}
		return s, false, refused
	case '=':
		s := string(c.bytes(int(c.byte())))
		format := []string{"txt", "mkd"}[c.byte()%2]
		fmt.Fprintf(b, "=%d\r\n%s:%s\r\n", len(format)+1+len(s), format, s)
		return s, false, refused
	case '*', '~', '%', '>':
		n := int(c.byte() % 4)
		fmt.Fprintf(b, "%c%d\r\n", k, n)
		if k == '%' {
			n *= 2
		}
		l := make([]any, n)
		for i := range l {
			var r bool
			l[i], _, r = draw(c, b, depth+1)
			refused = refused || r
		}
		return l, k == '>', refused
	case '|':
		n := int(c.byte() % 3)
		fmt.Fprintf(b, "|%d\r\n", n)
		for range 2 * n {
			_, _, r := draw(c, b, depth+1)
			refused = refused || r
		}
		want, push, r := draw(c, b, depth+1)
		return want, push, refused || r
	case 'L':
		// A simple string or error near maxLine, made of a piece of c
		// repeated.
		n := maxLine - 64 + int(c.byte())
		piece := strings.ReplaceAll(string(c.bytes(int(c.byte()%8))), "\n", " ")
		if piece == "" {
			piece = "x"
		}
		s := strings.Repeat(piece, n/len(piece)+1)[:n-1]
		if c.byte()%2 == 0 {
			fmt.Fprintf(b, "+%s\r\n", s)
			return s, false, refused || n > maxLine
		}
		fmt.Fprintf(b, "-%s\r\n", s)
		return &serverError{msg: s}, false, refused || n > maxLine
	case 'H':
		kind := "$!=*~%>|"[c.byte()%8]
		limit := uint64(maxBulk)
		if strings.IndexByte("*~%>|", kind) >= 0 {
			limit = maxAggregate
		}
		fmt.Fprintf(b, "%c%d\r\n", kind, limit+1+c.uint64()%(math.MaxInt64-limit))
		return nil, false, true
	}
	panic(fmt.Sprintf("draw: kind %q", k))
}
