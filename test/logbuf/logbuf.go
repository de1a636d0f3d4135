// Package logbuf is test support: a buffer that collects the JSON log lines
// of the code under test, safe for the goroutines that code starts. It
// writes nothing elsewhere and is imported only by tests.
package logbuf

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer collects log lines; its zero value is ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is every line written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger logs JSON lines into b.
func (b *Buffer) Logger() *slog.Logger { return slog.New(slog.NewJSONHandler(b, nil)) }
