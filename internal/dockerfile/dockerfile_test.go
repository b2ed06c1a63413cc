package dockerfile

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	stages, err := Parse(strings.NewReader(`ARG GO_VERSION=1.26
# a comment
FROM golang:${GO_VERSION} AS build
RUN go build \
      -o /out/upgrader   ./examples/upgrader

from scratch AS upgrader
COPY --from=build /out/upgrader /upgrader
ENV PATH=/bin
FROM upgrader
COPY staging/ /staging/
`))
	require.NoError(t, err)
	want := []Stage{
		{From: "golang:${GO_VERSION}", Name: "build", Instructions: []Instruction{{"RUN", "go build -o /out/upgrader ./examples/upgrader"}}},
		{From: "scratch", Name: "upgrader", Instructions: []Instruction{{"COPY", "--from=build /out/upgrader /upgrader"}, {"ENV", "PATH=/bin"}}},
		{From: "upgrader", Instructions: []Instruction{{"COPY", "staging/ /staging/"}}},
	}
	require.Empty(t, cmp.Diff(want, stages))
	up, ok := Find(stages, "upgrader")
	require.True(t, ok)
	require.Equal(t, []string{"--from=build /out/upgrader /upgrader"}, up.All("COPY"))
	_, ok = Find(stages, "tools")
	require.False(t, ok)
}
