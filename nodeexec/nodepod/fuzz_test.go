package nodepod

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/upgradekit/upgradekit/nodeexec"
)

// FuzzBuild feeds Build hostile options (names, labels, tolerations,
// paths, commands, resources) around a valid plan: it never panics, every
// refusal is a typed error (ErrInvalidOptions, or the plan's
// ErrInvalidPlan), and every pod it returns has what the API server checks
// first: a DNS-label name, valid label keys and values, unique DNS-label
// container names and valid toleration operators.
func FuzzBuild(f *testing.F) {
	f.Add("registry/upgrader:v1", "upgradekit-system", "sa", "system-node-critical", "team", "nodes", "k", "Exists", "NoExecute", "/upgrader run", "/staging", "100m", "", true)
	f.Add("", "", "", "", "", "", "", "", "", "", "", "", "", false)
	f.Add("img :x", "NS", "Bad_SA", "a b", "bad key", "a b", "bad key", "Maybe", "Never", "\x00", "rel", "-1", "1m", true)
	f.Fuzz(func(t *testing.T, image, ns, sa, prio, lk, lv, tk, top, teff, runner, stage, cpuReq, cpuLim string, single bool) {
		plan := nodeexec.Plan{Name: "p", Node: "n", Steps: []nodeexec.Step{{Name: "s", Argv: []string{"true"}, Timeout: time.Minute}}}
		opts := []Option{WithImage(image), WithNamespace(ns), WithServiceAccount(sa), WithPriorityClass(prio),
			WithLabels(map[string]string{lk: lv}), WithTolerations(corev1.Toleration{Key: tk, Operator: corev1.TolerationOperator(top), Effect: corev1.TaintEffect(teff)})}
		if runner != "" {
			opts = append(opts, WithRunnerCommand(strings.Fields(runner)...))
		}
		if stage != "" {
			opts = append(opts, WithStageFrom(stage))
		}
		if single {
			opts = append(opts, WithMode(ModeSingleContainer))
		}
		res := corev1.ResourceRequirements{}
		if q, err := resource.ParseQuantity(cpuReq); err == nil {
			res.Requests = corev1.ResourceList{corev1.ResourceCPU: q}
		}
		if q, err := resource.ParseQuantity(cpuLim); err == nil {
			res.Limits = corev1.ResourceList{corev1.ResourceCPU: q}
		}
		opts = append(opts, WithResources(res))
		pod, err := Build(plan, opts...)
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) && !errors.Is(err, nodeexec.ErrInvalidPlan) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if msgs := validation.IsDNS1123Label(pod.Name); len(msgs) > 0 {
			t.Fatalf("pod name %q: %v", pod.Name, msgs)
		}
		for k, v := range pod.Labels {
			if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
				t.Fatalf("label %q=%q is not valid", k, v)
			}
		}
		seen := map[string]bool{}
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			if len(validation.IsDNS1123Label(c.Name)) > 0 || seen[c.Name] {
				t.Fatalf("container name %q invalid or repeated", c.Name)
			}
			seen[c.Name] = true
			if c.Image != image {
				t.Fatalf("container %s runs %q, not the image %q", c.Name, c.Image, image)
			}
		}
		for _, tol := range pod.Spec.Tolerations {
			if tol.Operator != corev1.TolerationOpExists && tol.Operator != corev1.TolerationOpEqual && tol.Operator != "" {
				t.Fatalf("toleration operator %q", tol.Operator)
			}
		}
	})
}
