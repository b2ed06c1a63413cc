// Package dockerfile reads a Dockerfile's stages and instructions, enough
// for tests to check what an image built from it holds without running
// docker. It joins continuation lines and drops comments and blank lines;
// it does not expand variables, parse JSON-form arguments or understand
// heredocs.
package dockerfile

import (
	"bufio"
	"io"
	"regexp"
	"strings"
)

// Instruction is one instruction: Cmd upper-cased, Args with runs of
// whitespace folded to one space.
type Instruction struct {
	Cmd, Args string
}

// Stage is a FROM and the instructions after it.
type Stage struct {
	// From is the base image or stage; Name is the "AS" name ("" without).
	From, Name   string
	Instructions []Instruction
}

// All returns the arguments of every cmd instruction of the stage, in
// order.
func (s Stage) All(cmd string) []string {
	var out []string
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in.Args)
		}
	}
	return out
}

// Parse splits a Dockerfile into stages. Instructions before the first
// FROM (ARG) belong to no stage and are dropped.
func Parse(r io.Reader) ([]Stage, error) {
	var stages []Stage
	var cont string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cont += rest + " "
			continue
		}
		line, cont = cont+line, ""
		cmd, args, _ := strings.Cut(line, " ")
		cmd, args = strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")
		if cmd == "FROM" {
			from, name, _ := strings.Cut(args, " AS ")
			stages = append(stages, Stage{From: from, Name: name})
			continue
		}
		if len(stages) > 0 {
			last := &stages[len(stages)-1]
			last.Instructions = append(last.Instructions, Instruction{Cmd: cmd, Args: args})
		}
	}
	return stages, sc.Err()
}

// Find returns the stage named name.
func Find(stages []Stage, name string) (Stage, bool) {
	for _, s := range stages {
		if s.Name == name {
			return s, true
		}
	}
	return Stage{}, false
}

// pinned matches an image reference that names its content by digest.
var pinned = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// UnpinnedBases returns the base images of stages that a registry could
// change under the same name: every FROM that is neither "scratch", nor
// an earlier stage of the file, nor pinned by an @sha256: digest. A FROM
// that uses a build argument (${...}) counts as unpinned: its value is
// the builder's choice.
func UnpinnedBases(stages []Stage) []string {
	var out []string
	names := map[string]bool{}
	for _, s := range stages {
		from := s.From
		for strings.HasPrefix(from, "--") { // --platform=...
			_, from, _ = strings.Cut(from, " ")
		}
		switch {
		case strings.Contains(from, "$"):
			out = append(out, from)
		case from == "scratch", names[from], pinned.MatchString(from):
		default:
			out = append(out, from)
		}
		if s.Name != "" {
			names[s.Name] = true
		}
	}
	return out
}
