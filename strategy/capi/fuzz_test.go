package capi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// The hook handlers are the extension's entry points: whatever a caller
// sends (Cluster API, or anyone who can reach the Service), they answer
// without panicking, with a status Cluster API understands, and an
// accepting answer carries patches Cluster API can apply.

func FuzzCanUpdateMachine(f *testing.F) {
	cur, des, curCfg, desCfg, curInfra, desInfra := machinePair()
	seed := func(r any) {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	t := &testing.T{}
	seed(&runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, desCfg), InfrastructureMachine: raw(t, desInfra)},
	})
	seed(&runtimehooksv1.CanUpdateMachineRequest{
		CommonRequest: runtimehooksv1.CommonRequest{Settings: map[string]string{capi.SettingIgnore: "infrastructure.spec.additionalTags"}},
		Current:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *cur, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
		Desired:       runtimehooksv1.CanUpdateMachineRequestObjects{Machine: *des, BootstrapConfig: raw(t, curCfg), InfrastructureMachine: raw(t, curInfra)},
	})
	f.Add([]byte(`{"current":{"machine":{"spec":{"version":"v1.35.0"}}},"desired":{"machine":{"spec":{"version":"v9"}}}}`))
	f.Add([]byte(`{"settings":{"upgradekit.io/ignore":"[,**"},"current":{},"desired":{}}`))

	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	if err != nil {
		f.Fatal(err)
	}
	ext, err := capi.NewExtension(strategy.Updaters(kubeadm), capi.ExtensionOptions{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimehooksv1.CanUpdateMachineRequest
		if json.Unmarshal(data, &req) != nil {
			return
		}
		var resp runtimehooksv1.CanUpdateMachineResponse
		ext.CanUpdateMachine(context.Background(), &req, &resp)
		checkAnswer(t, resp.Status, resp.Message, resp.MachinePatch, resp.BootstrapConfigPatch, resp.InfrastructureMachinePatch)

		var setReq runtimehooksv1.CanUpdateMachineSetRequest
		if json.Unmarshal(data, &setReq) != nil {
			return
		}
		var setResp runtimehooksv1.CanUpdateMachineSetResponse
		ext.CanUpdateMachineSet(context.Background(), &setReq, &setResp)
		checkAnswer(t, setResp.Status, setResp.Message, setResp.MachineSetPatch, setResp.BootstrapConfigTemplatePatch, setResp.InfrastructureMachineTemplatePatch)
	})
}

func checkAnswer(t *testing.T, status runtimehooksv1.ResponseStatus, msg string, patches ...runtimehooksv1.Patch) {
	t.Helper()
	switch status {
	case runtimehooksv1.ResponseStatusSuccess:
	case runtimehooksv1.ResponseStatusFailure:
		if msg == "" {
			t.Fatal("a Failure without a message")
		}
		return
	default:
		t.Fatalf("status %q", status)
	}
	for _, p := range patches {
		if !p.IsDefined() {
			continue
		}
		switch p.PatchType {
		case runtimehooksv1.JSONPatchType:
			var ops []map[string]any
			if err := json.Unmarshal(p.Patch, &ops); err != nil {
				t.Fatalf("a JSON patch that is not a JSON array: %v: %s", err, p.Patch)
			}
			for _, op := range ops {
				path, _ := op["path"].(string)
				if !strings.HasPrefix(path, "/spec") {
					t.Fatalf("a patch outside spec (Cluster API applies spec only): %s", p.Patch)
				}
			}
		case runtimehooksv1.JSONMergePatchType:
			if !json.Valid(p.Patch) {
				t.Fatalf("a merge patch that is not JSON: %s", p.Patch)
			}
		default:
			t.Fatalf("patch type %q", p.PatchType)
		}
	}
}

// FuzzUpdateMachine sends arbitrary UpdateMachine requests to an updater
// whose workload cluster has one node: it answers without panicking,
// Success or a Failure whose message starts with a stable reason.
func FuzzUpdateMachine(f *testing.F) {
	for _, r := range []*runtimehooksv1.UpdateMachineRequest{
		updateReq("w-0", "docker:////cp-0", "v1.36.1", false),
		updateReq("w-0", "docker:////cp-0", "v1.37.0", true),
		updateReq("w-0", "docker:////nope", "v1.36.1", false),
		updateReq("w-0", "docker:////cp-0", "1.31", false),
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req runtimehooksv1.UpdateMachineRequest
		if json.Unmarshal(data, &req) != nil {
			return
		}
		c := crfake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&corev1.Node{}, &corev1.Pod{}).Build()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-0"}, Spec: corev1.NodeSpec{ProviderID: "docker:////cp-0"}}
		if err := c.Create(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		n.Status.NodeInfo.KubeletVersion = "v1.35.4"
		if err := c.Status().Update(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		workload := func(context.Context, types.NamespacedName) (client.Client, error) { return c, nil }
		u, err := capi.NewMachineUpdater(workload, capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{nodepod.WithImage("r/u:1")}})
		if err != nil {
			t.Fatal(err)
		}
		var resp runtimehooksv1.UpdateMachineResponse
		u.UpdateMachine(context.Background(), &req, &resp)
		switch resp.Status {
		case runtimehooksv1.ResponseStatusSuccess:
		case runtimehooksv1.ResponseStatusFailure:
			if failureReason(resp.Message) == "" {
				t.Fatalf("a Failure without a stable reason: %s", resp.Message)
			}
		default:
			t.Fatalf("status %q", resp.Status)
		}
	})
}
