package cli

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/term"
)

// IsTerminal says whether w is a terminal (a character device), where
// progress may be drawn.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Progress draws one status line that rewrites itself on a terminal; on
// anything else (a pipe, a file, a test's buffer) it prints nothing, so
// logs and scripts never see it. Safe for concurrent use.
type Progress struct {
	mu     sync.Mutex
	w      io.Writer
	on     bool
	drawn  bool
	prefix string
}

// NewProgress returns a Progress for w, on only when w is a terminal.
// prefix names the command on the line.
func NewProgress(w io.Writer, prefix string) *Progress {
	return &Progress{w: w, on: IsTerminal(w), prefix: prefix}
}

// Printf replaces the status line.
func (p *Progress) Printf(format string, a ...any) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r\033[K%s: "+format, append([]any{p.prefix}, a...)...)
	p.drawn = true
}

// Done clears the status line.
func (p *Progress) Done() {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}
