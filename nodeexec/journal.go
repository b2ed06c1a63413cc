package nodeexec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/upgradekit/upgradekit/internal/errtext"
)

// journalVersion is the journal file format version this package writes.
const journalVersion = 1

// StepState is the journaled state of one step.
type StepState string

// Step states.
const (
	StepStatePending     StepState = "Pending"
	StepStateRunning     StepState = "Running" // started, not known to have finished
	StepStateSucceeded   StepState = "Succeeded"
	StepStateSkipped     StepState = "Skipped" // its check said it was already done
	StepStateFailed      StepState = "Failed"
	StepStateRollingBack StepState = "RollingBack"
	StepStateRolledBack  StepState = "RolledBack"
)

func (s StepState) known() bool {
	switch s {
	case StepStatePending, StepStateRunning, StepStateSucceeded, StepStateSkipped, StepStateFailed, StepStateRollingBack, StepStateRolledBack:
		return true
	}
	return false
}

// PlanState is the journaled state of the whole plan.
type PlanState string

// Plan states. Succeeded, Failed, RolledBack and NeedsAttention are
// terminal: running a plan whose journal is terminal returns the recorded
// outcome and runs nothing.
const (
	PlanStateRunning        PlanState = "Running"
	PlanStateRollingBack    PlanState = "RollingBack"
	PlanStateSucceeded      PlanState = "Succeeded"
	PlanStateFailed         PlanState = "Failed"
	PlanStateRolledBack     PlanState = "RolledBack"
	PlanStateNeedsAttention PlanState = "NeedsAttention"
)

// Terminal reports whether the plan has finished, one way or another.
func (s PlanState) Terminal() bool {
	switch s {
	case PlanStateSucceeded, PlanStateFailed, PlanStateRolledBack, PlanStateNeedsAttention:
		return true
	}
	return false
}

func (s PlanState) known() bool {
	return s.Terminal() || s == PlanStateRunning || s == PlanStateRollingBack
}

// StepRecord is the journal entry of one step.
type StepRecord struct {
	Name  string    `json:"name"`
	State StepState `json:"state"`
	// Attempts counts runs of the main argv, across restarts of the runner.
	Attempts int `json:"attempts,omitempty"`
	// BackupTaken records that the backup argv completed.
	BackupTaken bool `json:"backupTaken,omitempty"`
	// Resumed counts how often this step was found interrupted on resume.
	Resumed int `json:"resumed,omitempty"`
	// ExitCode and Output describe the last run of the main argv.
	ExitCode int       `json:"exitCode,omitempty"`
	Output   string    `json:"output,omitempty"`
	Note     string    `json:"note,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// RolledBack is when the step's rollback completed (State
	// StepStateRolledBack); Started and Finished stay those of its run.
	RolledBack time.Time `json:"rolledBack,omitzero"`
}

// Failure describes why a plan did not succeed.
type Failure struct {
	Step     string `json:"step"`
	Phase    Phase  `json:"phase"`
	ExitCode int    `json:"exitCode"`
	Output   string `json:"output,omitempty"`
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// Outcome is the state of a plan as recorded in its journal.
type Outcome struct {
	Plan    string       `json:"plan"`
	Node    string       `json:"node"`
	State   PlanState    `json:"state"`
	Steps   []StepRecord `json:"steps"`
	Failure *Failure     `json:"failure,omitempty"`
	// Runs counts how many times a runner process picked this plan up.
	Runs int `json:"runs"`
}

// Progress is the fraction of steps that succeeded or were skipped.
func (o Outcome) Progress() float64 {
	if len(o.Steps) == 0 {
		return 0
	}
	done := 0
	for _, s := range o.Steps {
		if s.State == StepStateSucceeded || s.State == StepStateSkipped {
			done++
		}
	}
	return float64(done) / float64(len(o.Steps))
}

// Step returns the record of the named step.
func (o Outcome) Step(name string) (StepRecord, bool) {
	for _, s := range o.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return StepRecord{}, false
}

// Journal is the on-disk form: a format version, the plan fingerprint and
// the outcome.
type Journal struct {
	Version     int       `json:"version"`
	Fingerprint string    `json:"fingerprint"`
	Updated     time.Time `json:"updated,omitzero"`
	Outcome
}

// JournalFileName is the file name of plan's journal inside the journal
// directory. It does not check planName: use Runner.JournalPath, or
// CheckPlanName first, with a name that comes from outside.
func JournalFileName(planName string) string { return planName + ".journal.json" }

// maxJournalSize bounds a journal file: ReadJournal refuses a larger one
// (ErrJournalTooLarge) and the runner never writes one. A plan of 15 steps
// that all kept a full 4096-byte output tail (the default
// RunnerOptions.JournalOutputLimit) takes about 80 KB of JSON, 400 KB when every
// output byte is a control character JSON escapes in 6 bytes.
const maxJournalSize = 1 << 20

// Errors about the journal file itself, wrapped by a *JournalError.
var (
	// ErrJournalTooLarge: the journal file is larger than 1 MiB,
	// or a journal would be, even with the step outputs it keeps cut.
	ErrJournalTooLarge = errors.New("journal is too large")
	// ErrJournalNotRegular: the journal or its lock file is a symbolic
	// link, a directory, a device or anything else but a regular file. It
	// is neither read nor written through.
	ErrJournalNotRegular = errors.New("journal is not a regular file")
)

// ReadJournal reads and checks a journal file. A missing file is returned
// as an error satisfying errors.Is(err, fs.ErrNotExist); an undecodable or
// inconsistent one as ErrJournalCorrupt; a symbolic link or anything else
// but a regular file (never followed or read) as ErrJournalNotRegular; one
// larger than 1 MiB (never read whole) as ErrJournalTooLarge.
func ReadJournal(path string) (Journal, error) {
	data, err := readJournalPath(path)
	if err != nil {
		return Journal{}, err
	}
	j, err := DecodeJournal(data)
	if err != nil {
		var je *JournalError
		if errors.As(err, &je) {
			je.Path = path
		}
		return Journal{}, err
	}
	return j, nil
}

// readJournalPath is readJournalFile with the path of a *fs.PathError
// cut: the error may be logged or reported.
func readJournalPath(path string) ([]byte, error) {
	data, err := readJournalFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = errtext.Quote(pe.Path)
		}
		return nil, err
	}
	return data, nil
}

// readJournalFile reads path if it is a regular file of at most
// maxJournalSize bytes, without following a symbolic link or blocking on
// a FIFO.
func readJournalFile(path string) ([]byte, error) {
	notRegular := func(mode fs.FileMode) error {
		return &JournalError{Path: errtext.Quote(path), Err: ErrJournalNotRegular, Detail: "it is a " + fileKind(mode)}
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	f, err := openNoFollow(path, os.O_RDONLY, 0)
	if err != nil {
		if errors.Is(err, errSymlink) {
			return nil, notRegular(fs.ModeSymlink)
		}
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	tooLarge := &JournalError{Path: errtext.Quote(path), Err: ErrJournalTooLarge, Detail: fmt.Sprintf("more than %d bytes", maxJournalSize)}
	if fi.Size() > maxJournalSize {
		return nil, tooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, maxJournalSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxJournalSize { // it grew since the Stat
		return nil, tooLarge
	}
	return data, nil
}

// fileKind names the type of a file mode for an error message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "non-regular file"
}

// DecodeJournal parses journal bytes strictly (unknown fields, trailing
// data, unknown states, duplicate step names and step states that contradict
// each other or the plan state are ErrJournalCorrupt).
func DecodeJournal(data []byte) (Journal, error) {
	corrupt := func(format string, args ...any) (Journal, error) {
		return Journal{}, &JournalError{Err: ErrJournalCorrupt, Detail: fmt.Sprintf(format, args...)}
	}
	var j Journal
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return corrupt("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("trailing data")
	}
	if j.Version != journalVersion {
		return corrupt("format version %d, want %d", j.Version, journalVersion)
	}
	if j.Fingerprint == "" || j.Plan == "" {
		return corrupt("missing plan name or fingerprint")
	}
	if !j.State.known() {
		return corrupt("unknown plan state %q", j.State)
	}
	seen := map[string]bool{}
	for i, s := range j.Steps {
		if s.Name == "" || seen[s.Name] {
			return corrupt("steps[%d]: empty or duplicate name %q", i, s.Name)
		}
		seen[s.Name] = true
		if !s.State.known() {
			return corrupt("steps[%d]: unknown state %q", i, s.State)
		}
		if s.Attempts < 0 || s.Resumed < 0 {
			return corrupt("steps[%d]: negative counter", i)
		}
	}
	if err := checkStepStates(j.Outcome); err != nil {
		return corrupt("%v", err)
	}
	return j, nil
}

// checkStepStates checks that the step states of a non-terminal plan are
// ones the runner can have written: the runner walks the steps in order
// and rolls back in reverse order, so a journal that contradicts itself
// (a step finished after one that never started, a rolled-back step in a
// plan that is still running forward) was edited or damaged, and resuming
// from it could run the wrong steps. Terminal journals are only reported,
// never resumed, so they are not checked here.
func checkStepStates(o Outcome) error {
	var allowed map[StepState]bool
	switch o.State {
	case PlanStateRunning:
		allowed = map[StepState]bool{StepStatePending: true, StepStateRunning: true, StepStateSucceeded: true, StepStateSkipped: true}
	case PlanStateRollingBack:
		allowed = map[StepState]bool{StepStatePending: true, StepStateSucceeded: true, StepStateSkipped: true, StepStateFailed: true, StepStateRollingBack: true, StepStateRolledBack: true}
	default:
		return nil
	}
	count := map[StepState]int{}
	firstOpen := -1   // first step that has not finished (Pending, or Running)
	rollingBack := -1 // the step being rolled back
	for i, s := range o.Steps {
		if !allowed[s.State] {
			return fmt.Errorf("steps[%d] %q is %s while the plan is %s", i, s.Name, s.State, o.State)
		}
		count[s.State]++
		if firstOpen >= 0 && s.State != StepStatePending {
			return fmt.Errorf("steps[%d] %q is %s after steps[%d] %q, which is %s", i, s.Name, s.State, firstOpen, o.Steps[firstOpen].Name, o.Steps[firstOpen].State)
		}
		if s.State == StepStatePending || s.State == StepStateRunning {
			firstOpen = i
		}
		if s.State == StepStateRollingBack {
			rollingBack = i
		}
		if s.State == StepStateRolledBack && rollingBack < 0 {
			for k := i + 1; k < len(o.Steps); k++ {
				if o.Steps[k].State == StepStateRollingBack {
					return fmt.Errorf("steps[%d] %q is %s before steps[%d] %q, which is still %s (rollback runs in reverse order)", i, s.Name, s.State, k, o.Steps[k].Name, StepStateRollingBack)
				}
			}
		}
	}
	for _, st := range []StepState{StepStateRunning, StepStateFailed, StepStateRollingBack} {
		if count[st] > 1 {
			return fmt.Errorf("%d steps are %s; at most one can be", count[st], st)
		}
	}
	return nil
}

// encodeJournal marshals j, newline-terminated, in at most maxJournalSize
// bytes. The JSON is compact: the journal is rewritten at every state
// change, and indenting it cost as much as encoding it (`upgrader status`
// or jq read it for people). A journal that would be larger than 1 MiB (a
// huge RunnerOptions.JournalOutputLimit) has its step outputs cut to their
// last half, quarter... until it fits, so that the runner can always read
// back what it wrote; one that does not fit even without them is
// ErrJournalTooLarge.
func encodeJournal(j Journal) ([]byte, error) {
	limit := 0
	for _, s := range j.Steps {
		limit = max(limit, len(s.Output))
	}
	if j.Failure != nil {
		limit = max(limit, len(j.Failure.Output))
	}
	for {
		data, err := marshalJournal(j)
		if err != nil {
			return nil, err
		}
		if len(data) <= maxJournalSize {
			return data, nil
		}
		if limit == 0 {
			return nil, fmt.Errorf("%w: %d bytes without step outputs, more than %d", ErrJournalTooLarge, len(data), maxJournalSize)
		}
		limit /= 2
		j = cutOutputs(j, limit)
	}
}

// marshalJournal returns json.Marshal(j) and a newline, byte for byte
// (TestMarshalJournalIsJSONMarshal, FuzzMarshalJournal), written without
// reflection: the runner encodes its journal at every state change, about
// 25 times a plan, and encoding/json's walk of the steps was most of what
// a journal write cost once it no longer touched a disk. A time that
// RFC 3339 cannot hold is an error, json.Marshal's own.
func marshalJournal(j Journal) ([]byte, error) {
	size := 160 + len(j.Fingerprint) + len(j.Plan) + len(j.Node)
	for i := range j.Steps {
		size += 150 + len(j.Steps[i].Name) + len(j.Steps[i].Output) + len(j.Steps[i].Note)
	}
	if j.Failure != nil {
		size += 100 + len(j.Failure.Step) + len(j.Failure.Output) + len(j.Failure.Error)
	}
	b := make([]byte, 0, size)
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(j.Version), 10)
	b = appendJSONField(b, "fingerprint", j.Fingerprint)
	var ok bool
	if b, ok = appendJSONTime(b, "updated", j.Updated); !ok {
		return jsonMarshalJournal(j)
	}
	b = appendJSONField(b, "plan", j.Plan)
	b = appendJSONField(b, "node", j.Node)
	b = appendJSONField(b, "state", string(j.State))
	b = append(b, `,"steps":`...)
	if j.Steps == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range j.Steps {
			s := &j.Steps[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, s.Name)
			b = appendJSONField(b, "state", string(s.State))
			b = appendJSONInt(b, "attempts", s.Attempts)
			if s.BackupTaken {
				b = append(b, `,"backupTaken":true`...)
			}
			b = appendJSONInt(b, "resumed", s.Resumed)
			b = appendJSONInt(b, "exitCode", s.ExitCode)
			b = appendJSONNonEmpty(b, "output", s.Output)
			b = appendJSONNonEmpty(b, "note", s.Note)
			for _, t := range []struct {
				name string
				t    *time.Time
			}{{"started", &s.Started}, {"finished", &s.Finished}, {"rolledBack", &s.RolledBack}} {
				if b, ok = appendJSONTime(b, t.name, *t.t); !ok {
					return jsonMarshalJournal(j)
				}
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if f := j.Failure; f != nil {
		b = append(b, `,"failure":{"step":`...)
		b = appendJSONString(b, f.Step)
		b = appendJSONField(b, "phase", string(f.Phase))
		b = append(b, `,"exitCode":`...)
		b = strconv.AppendInt(b, int64(f.ExitCode), 10)
		b = appendJSONNonEmpty(b, "output", f.Output)
		b = appendJSONNonEmpty(b, "error", f.Error)
		b = appendJSONInt(b, "attempts", f.Attempts)
		b = append(b, '}')
	}
	b = append(b, `,"runs":`...)
	b = strconv.AppendInt(b, int64(j.Runs), 10)
	return append(b, "}\n"...), nil
}

// jsonMarshalJournal is what marshalJournal stands for: json.Marshal(j)
// and a newline. marshalJournal returns it where a time fails, for
// json.Marshal's error.
func jsonMarshalJournal(j Journal) ([]byte, error) {
	data, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// appendJSONField appends ,"name":value.
func appendJSONField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, value)
}

// appendJSONNonEmpty appends ,"name":value unless value is empty
// (omitempty).
func appendJSONNonEmpty(b []byte, name, value string) []byte {
	if value == "" {
		return b
	}
	return appendJSONField(b, name, value)
}

// appendJSONInt appends ,"name":v unless v is 0 (omitempty).
func appendJSONInt(b []byte, name string, v int) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, int64(v), 10)
}

// appendJSONTime appends ,"name":t as time.Time.MarshalJSON writes it,
// unless t is zero (omitzero). It reports false, with b unchanged, when
// MarshalJSON fails.
func appendJSONTime(b []byte, name string, t time.Time) ([]byte, bool) {
	if t.IsZero() {
		return b, true
	}
	v, err := t.MarshalJSON() // compact, and nothing in it to escape
	if err != nil {
		return b, false
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return append(b, v...), true
}

// appendJSONString appends s quoted as encoding/json quotes a string
// (HTML-safe: <, > and & escaped; invalid UTF-8 as \ufffd; U+2028 and
// U+2029 escaped).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// cutOutputs returns a copy of j whose outputs keep their last limit bytes.
func cutOutputs(j Journal, limit int) Journal {
	tail := func(s string) string {
		if len(s) > limit {
			return s[len(s)-limit:]
		}
		return s
	}
	j.Steps = slices.Clone(j.Steps)
	for i := range j.Steps {
		j.Steps[i].Output = tail(j.Steps[i].Output)
	}
	if j.Failure != nil {
		f := *j.Failure
		f.Output = tail(f.Output)
		j.Failure = &f
	}
	return j
}
