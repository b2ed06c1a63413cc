package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// progress prints a line for every step whose journaled state changes.
type progress struct {
	w    io.Writer
	last map[string]nodeexec.StepRecord
}

func (p *progress) update(o nodeexec.Outcome) {
	if p.last == nil {
		p.last = map[string]nodeexec.StepRecord{}
	}
	for i, s := range o.Steps {
		old, seen := p.last[s.Name]
		p.last[s.Name] = s
		changed := old.State != s.State || old.Attempts != s.Attempts || old.Note != s.Note || old.BackupTaken != s.BackupTaken
		if (!seen && s.State == nodeexec.StepStatePending && !s.BackupTaken) || (seen && !changed) {
			continue
		}
		line := string(s.State)
		switch s.State {
		case nodeexec.StepStateRunning:
			line += " (attempt " + strconv.Itoa(s.Attempts) + ")"
		case nodeexec.StepStateSucceeded, nodeexec.StepStateFailed:
			line += fmt.Sprintf(" (exit %d, %d attempt(s))", s.ExitCode, s.Attempts)
		case nodeexec.StepStatePending:
			line += " (backup taken)"
		}
		if s.Note != old.Note {
			line += suffix(": ", s.Note)
		}
		fmt.Fprintf(p.w, "[%d/%d] %s: %s\n", i+1, len(o.Steps), s.Name, line)
	}
}
