package redislease

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// conn is one RESP3 connection to a Redis server that a lease owns: no
// caller can send on it, close it or take it from a pool. It is dialed with
// the dialer of the caller's client (so that TLS, Sentinel's discovery of
// the primary and a custom dialer apply), and speaks RESP3 itself, so that
// the pushes of CLIENT TRACKING reach the lease the moment the server sends
// them instead of waiting for the next command, as a pooled connection of
// the client would.
//
// Commands may be sent from several goroutines; their replies come back in
// order. A command whose context ends before its reply closes the
// connection: the stream can no longer be trusted, and the lease dials
// another.
type conn struct {
	nc     net.Conn
	pushes chan []any // invalidation pushes, coalesced: one pending is enough
	dead   chan struct{}

	mu      sync.Mutex // guards w, pending, err
	w       *bufio.Writer
	pending []chan reply
	err     error // why the connection is dead
	reading bool  // whether the reader has started
	reader  sync.WaitGroup
	hello   map[string]any // the server's answer to HELLO
	// onPush, if set, takes every invalidation push in place of pushes:
	// a session's tracking connection, whose pushes name the keys of
	// many leases, none of which may be dropped.
	onPush func([]any)
}

// reply is one reply: a value, or an error (a *serverError for an error
// reply, anything else for a failed connection).
type reply struct {
	v   any
	err error
}

// serverError is an error reply from Redis, such as "NOPERM ..." or
// "READONLY ...".
type serverError struct{ msg string }

func (e *serverError) Error() string { return e.msg }

// code returns the error's first word: "ERR", "NOPERM", "READONLY".
func (e *serverError) code() string {
	for i := 0; i < len(e.msg); i++ {
		if e.msg[i] == ' ' {
			return e.msg[:i]
		}
	}
	return e.msg
}

// errConnClosed reports a command on a connection already closed.
var errConnClosed = errors.New("connection closed")

// credentials is what HELLO authenticates with; user "" means "default".
type credentials struct {
	user, password string
}

// dialConn dials with dial, then sends HELLO 3 with the credentials and
// SELECT db, each bounded by ctx.
func dialConn(ctx context.Context, dial func(context.Context) (net.Conn, error), cred credentials, db int) (*conn, error) {
	nc, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	c := &conn{
		nc:     nc,
		pushes: make(chan []any, 1),
		dead:   make(chan struct{}),
		w:      bufio.NewWriter(nc),
	}
	args := []any{"HELLO", "3"}
	if cred.password != "" {
		user := cred.user
		if user == "" {
			user = "default"
		}
		args = append(args, "AUTH", user, cred.password)
	}
	v, err := c.do(ctx, args...)
	if err != nil {
		c.close()
		var se *serverError
		switch {
		case errors.As(err, &se) && strings.Contains(se.msg, "max number of clients reached"):
			// Redis answers a connection over maxclients so, whatever it
			// was sent.
			return nil, fmt.Errorf("the server's connection limit (maxclients) is reached; the lease holds two connections of its own per client and server: %w", err)
		case errors.As(err, &se) && se.code() == "ERR":
			return nil, fmt.Errorf("HELLO 3 (Redis 6 or later is needed): %w", err)
		}
		return nil, fmt.Errorf("HELLO 3: %w", err)
	}
	c.hello = pairs(v)
	if db != 0 {
		if _, err := c.do(ctx, "SELECT", strconv.Itoa(db)); err != nil {
			c.close()
			return nil, fmt.Errorf("SELECT %d: %w", db, err)
		}
	}
	return c, nil
}

// addr returns the address of the server's end of the connection.
func (c *conn) addr() string { return c.nc.RemoteAddr().String() }

// setOnPush makes f take the connection's invalidation pushes.
func (c *conn) setOnPush(f func([]any)) {
	c.mu.Lock()
	c.onPush = f
	c.mu.Unlock()
}

// id returns the client id HELLO reported.
func (c *conn) id() int64 {
	n, _ := c.hello["id"].(int64)
	return n
}

// role returns the role HELLO reported: "master" or "replica".
func (c *conn) role() string {
	s, _ := c.hello["role"].(string)
	return s
}

// pairs reads a RESP3 map, which read returns as a flat list of keys and
// values, into a Go map with string keys.
func pairs(v any) map[string]any {
	m := map[string]any{}
	l, _ := v.([]any)
	for i := 0; i+1 < len(l); i += 2 {
		if k, ok := l[i].(string); ok {
			m[k] = l[i+1]
		}
	}
	return m
}

// do sends one command and returns its reply.
func (c *conn) do(ctx context.Context, args ...any) (any, error) {
	r, err := c.pipe(ctx, args)
	if err != nil {
		return nil, err
	}
	return r[0].v, r[0].err
}

// pipe sends cmds in one write and returns their replies, in order. The
// error is for the connection; each reply may hold a server's error. A ctx
// that ends before the replies fails the connection.
func (c *conn) pipe(ctx context.Context, cmds ...[]any) ([]reply, error) {
	return c.send(ctx, true, 0, cmds)
}

// pipeShared is pipe on a connection that other callers share: a ctx that
// ends before the replies returns ctx's error and leaves the connection
// as it is (its replies are read and dropped), so that one caller's
// cancelled Lock does not break the leases of the others. The write is
// bounded by bound, not by ctx.
func (c *conn) pipeShared(ctx context.Context, bound time.Duration, cmds ...[]any) ([]reply, error) {
	return c.send(ctx, false, bound, cmds)
}

// send is pipe if cancelFails, pipeShared otherwise.
func (c *conn) send(ctx context.Context, cancelFails bool, bound time.Duration, cmds [][]any) ([]reply, error) {
	waits := make([]chan reply, len(cmds))
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	for i, args := range cmds {
		writeCommand(c.w, args)
		waits[i] = make(chan reply, 1)
	}
	c.pending = append(c.pending, waits...)
	if !cancelFails {
		c.nc.SetWriteDeadline(time.Now().Add(bound))
	} else if dl, ok := ctx.Deadline(); ok {
		c.nc.SetWriteDeadline(dl)
	} else {
		c.nc.SetWriteDeadline(time.Time{})
	}
	err := c.w.Flush()
	if !c.reading {
		// The reader starts once HELLO waits for its reply: Redis refuses a
		// connection over maxclients with an error written at accept, which
		// a reader started before would take for a reply to no command.
		c.reading = true
		c.reader.Add(1)
		go c.read()
	}
	c.mu.Unlock()
	if err != nil {
		c.fail(err)
	}
	out := make([]reply, len(cmds))
	for i, w := range waits {
		select {
		case r := <-w:
			out[i] = r
			if r.err != nil && !isServerError(r.err) {
				return nil, r.err
			}
		case <-ctx.Done():
			if cancelFails {
				c.fail(fmt.Errorf("no reply before the context ended: %w", ctx.Err()))
			}
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func isServerError(err error) bool {
	var se *serverError
	return errors.As(err, &se)
}

// fail marks the connection dead with err and closes it; the reader
// answers every pending command with err.
func (c *conn) fail(err error) {
	c.mu.Lock()
	first := c.err == nil
	if first {
		c.err = err
	}
	c.mu.Unlock()
	if first {
		close(c.dead)
		_ = c.nc.Close()
	}
}

// close closes the connection and waits for its reader to return.
func (c *conn) close() {
	c.fail(errConnClosed)
	c.reader.Wait()
}

// read reads replies and pushes until the connection fails.
func (c *conn) read() {
	defer c.reader.Done()
	rd := bufio.NewReader(c.nc)
	for {
		v, push, err := readValue(rd)
		if err != nil {
			c.fail(err)
			c.mu.Lock()
			pending, err := c.pending, c.err
			c.pending = nil
			c.mu.Unlock()
			for _, w := range pending {
				w <- reply{err: err}
			}
			return
		}
		if push {
			if l, ok := v.([]any); ok && len(l) > 0 && l[0] == "invalidate" {
				c.mu.Lock()
				onPush := c.onPush
				c.mu.Unlock()
				if onPush != nil {
					onPush(l)
					continue
				}
				select {
				case c.pushes <- l:
				default: // one pending invalidation makes the follower read the key; that is enough
				}
			}
			continue
		}
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.mu.Unlock()
			c.fail(errors.New("a reply to no command"))
			continue
		}
		w := c.pending[0]
		c.pending = c.pending[1:]
		c.mu.Unlock()
		if se, ok := v.(*serverError); ok {
			w <- reply{err: se}
		} else {
			w <- reply{v: v}
		}
	}
}

func writeCommand(w *bufio.Writer, args []any) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		var s string
		switch a := a.(type) {
		case string:
			s = a
		case int:
			s = strconv.Itoa(a)
		case int64:
			s = strconv.FormatInt(a, 10)
		default:
			panic(fmt.Sprintf("redislease: a command argument of type %T", a))
		}
		fmt.Fprintf(w, "$%d\r\n%s\r\n", len(s), s)
	}
}

// Limits on what readValue accepts, so that a broken or hostile server fails
// the connection instead of making its reader allocate what the server
// says, or recurse without end, either of which ends the process. No reply
// the lease reads comes near them: maxBulk is Redis's own largest
// proto-max-bulk-len, a value another client may have written to the key;
// the longest aggregate is HELLO's map, the deepest ROLE's list of replicas.
//
// maxLine bounds a line (a simple string, an error, a double, a big number,
// a length), CRLF not counted: it is Redis's own bound on a line it reads
// (PROTO_INLINE_MAX_SIZE). What a server sends that may be long, such as a
// key's value, comes as a bulk string, and the errors Redis writes are
// short (those that quote a command cut it to 128 bytes), so 64 KiB is far
// above any line the lease reads, while a line that never ends fails the
// connection after 64 KiB rather than after the 512 MiB of maxBulk.
const (
	maxBulk      = 512 << 20
	maxAggregate = 1 << 20
	maxDepth     = 16
	maxLine      = 64 << 10
)

// readValue reads one RESP3 value: a string, an int64, nil, a bool, a
// []any (arrays, sets, and maps as a flat list of keys and values) or a
// *serverError. push reports a push frame.
func readValue(rd *bufio.Reader) (v any, push bool, err error) {
	return readNested(rd, 0)
}

// readNested reads one value at depth aggregates deep.
func readNested(rd *bufio.Reader, depth int) (v any, push bool, err error) {
	if depth > maxDepth {
		return nil, false, fmt.Errorf("resp: a reply nested more than %d deep", maxDepth)
	}
	line, err := readLine(rd)
	if err != nil {
		return nil, false, err
	}
	if len(line) == 0 {
		return nil, false, errors.New("resp: empty line")
	}
	// line is rd's buffer, which the reads below overwrite: keep its type
	// and body, not the line.
	kind, body := line[0], string(line[1:])
	switch kind {
	case '+':
		return body, false, nil
	case '-':
		return &serverError{msg: body}, false, nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, false, err
		}
		return n, false, nil
	case '_':
		return nil, false, nil
	case ',', '(':
		return body, false, nil
	case '#':
		return body == "t", false, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, false, err
		}
		if n < 0 {
			return nil, false, nil
		}
		if n > maxBulk {
			return nil, false, fmt.Errorf("resp: a string of %d bytes, more than %d", n, maxBulk)
		}
		b, err := readFull(rd, n+2)
		if err != nil {
			return nil, false, err
		}
		s := string(b[:n])
		switch kind {
		case '!':
			return &serverError{msg: s}, false, nil
		case '=':
			if len(s) >= 4 {
				s = s[4:] // "txt:"
			}
		}
		return s, false, nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, false, err
		}
		if n < 0 {
			return nil, false, nil
		}
		if n > maxAggregate {
			return nil, false, fmt.Errorf("resp: an aggregate of %d elements, more than %d", n, maxAggregate)
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		l := make([]any, n)
		for i := range l {
			if l[i], _, err = readNested(rd, depth+1); err != nil {
				return nil, false, err
			}
		}
		if kind == '|' {
			// Attributes precede the value they describe: skip them. The
			// value counts one deeper, so that attributes in a row stop at
			// maxDepth as nesting does instead of recursing without end.
			return readNested(rd, depth+1)
		}
		return l, kind == '>', nil
	}
	return nil, false, fmt.Errorf("resp: unknown type %q", kind)
}

// readLine reads one line and takes its CRLF off. A line that fits in rd's
// buffer, as nearly all do, is returned in that buffer, valid until the next
// read of rd; a longer one is gathered into a slice of its own, up to
// maxLine.
func readLine(rd *bufio.Reader) ([]byte, error) {
	line, err := rd.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull && len(long) <= maxLine+2 {
			line, err = rd.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if len(line) > maxLine+2 {
		return nil, fmt.Errorf("resp: a line longer than %d bytes", maxLine)
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errors.New("resp: a line without CRLF")
	}
	return line[:len(line)-2], nil
}

// readFull reads n bytes. It allocates them as they arrive, doubling from
// 64 KiB, not at once as the length the server declares: a header of a few
// bytes cannot make the reader hold maxBulk, only maxBulk bytes sent can.
func readFull(rd io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, 64<<10))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(len(b), n-len(b)))
		}
		m, err := rd.Read(b[len(b):min(cap(b), n)])
		b = b[:len(b)+m]
		if err != nil && len(b) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return b, nil
}
