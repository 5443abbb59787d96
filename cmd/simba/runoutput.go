package main

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// maxLine is the longest line simba run --prefix-output holds back while
// it waits for the line's end: a longer one is passed on in pieces, each
// prefixed.
const maxLine = 64 << 10

// lineSink serialises what simba run writes, its own lines and its
// children's prefixed lines, so that no two lines are interleaved.
type lineSink struct{ mu sync.Mutex }

// line writes s and a newline to w.
func (o *lineSink) line(w io.Writer, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintln(w, s)
}

// prefixed returns a writer that writes every line given to it to w with
// prefix in front.
func (o *lineSink) prefixed(w io.Writer, prefix string) *prefixWriter {
	return &prefixWriter{o: o, w: w, prefix: prefix}
}

// prefixWriter writes whole lines, each after a prefix.
type prefixWriter struct {
	o      *lineSink
	w      io.Writer
	prefix string

	mu  sync.Mutex
	buf []byte // the start of a line whose end has not come yet
}

// Write writes the complete lines of b, and keeps the rest for the next
// Write or Flush.
func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := indexNewline(b)
		if i < 0 {
			p.buf = append(p.buf, b...)
			for len(p.buf) >= maxLine {
				p.emit(p.buf[:maxLine])
				p.buf = append(p.buf[:0], p.buf[maxLine:]...)
			}
			return n, nil
		}
		line := b[:i]
		if len(p.buf) > 0 {
			line = append(p.buf, line...)
			p.buf = p.buf[:0]
		}
		p.emit(line)
		b = b[i+1:]
	}
	return n, nil
}

// Flush writes what is left of an unfinished line, ended by a newline.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.emit(p.buf)
		p.buf = p.buf[:0]
	}
}

func (p *prefixWriter) emit(line []byte) {
	out := make([]byte, 0, len(p.prefix)+len(line)+1)
	out = append(append(append(out, p.prefix...), line...), '\n')
	p.o.mu.Lock()
	defer p.o.mu.Unlock()
	p.w.Write(out) // as a terminal would: a write that fails loses the line
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// shared returns w for writers other than the sink's own lines to share:
// an *os.File as it is, which a child inherits and writes to itself, and
// anything else behind the sink's lock.
func (o *lineSink) shared(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{o: o, w: w}
}

// lockedWriter writes to w under the sink's lock.
type lockedWriter struct {
	o *lineSink
	w io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.o.mu.Lock()
	defer l.o.mu.Unlock()
	return l.w.Write(b)
}

// progressWriter passes what a child writes on to w, and reports progress
// for each write that ends a line: each line the child writes counts as
// progress for its term's watchdog (simba.WithProgressWatchdog).
type progressWriter struct {
	w        io.Writer
	progress func()
}

func (p *progressWriter) Write(b []byte) (int, error) {
	if indexNewline(b) >= 0 {
		p.progress()
	}
	return p.w.Write(b)
}
