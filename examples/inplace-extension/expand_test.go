package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// containerArgs returns c's args as the kubelet passes them: each
// $(NAME) of an env var of c defined by value replaced with its value,
// $$ an escaped $, anything else left as it is (the kubelet's rules,
// restricted to what deploy/extension.yaml uses).
func containerArgs(c corev1.Container) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	out := make([]string, 0, len(c.Args))
	for _, a := range c.Args {
		var b strings.Builder
		for i := 0; i < len(a); i++ {
			if a[i] != '$' || i+1 == len(a) {
				b.WriteByte(a[i])
				continue
			}
			switch a[i+1] {
			case '$':
				b.WriteByte('$')
				i++
				continue
			case '(':
				if end := strings.IndexByte(a[i:], ')'); end > 0 {
					if v, ok := env[a[i+2:i+end]]; ok {
						b.WriteString(v)
						i += end
						continue
					}
				}
			}
			b.WriteByte(a[i])
		}
		out = append(out, b.String())
	}
	return out
}

func TestContainerArgs(t *testing.T) {
	c := corev1.Container{
		Args: []string{"-a=$(A)", "-b=$(B)", "-c=$(C)", "$$(A)", "x$", "$(A"},
		Env:  []corev1.EnvVar{{Name: "A", Value: "one"}, {Name: "B"}, {Name: "C", ValueFrom: &corev1.EnvVarSource{}}},
	}
	require.Equal(t, []string{"-a=one", "-b=", "-c=$(C)", "$(A)", "x$", "$(A"}, containerArgs(c))
}
