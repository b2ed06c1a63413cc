package capi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgradekit/upgradekit/nodeexec/nodepod"
	"github.com/upgradekit/upgradekit/strategy"
	"github.com/upgradekit/upgradekit/strategy/capi"
)

// TestOptionErrorsNameTheField: every constructor of the package refuses a
// bad option with a *capi.OptionError that matches ErrInvalidOption and
// names the struct and field, so a program can say which of its settings
// is wrong (the extension's command maps them to its flags).
func TestOptionErrorsNameTheField(t *testing.T) {
	workload := func(context.Context, types.NamespacedName) (client.Client, error) {
		return nil, errors.New("not called")
	}
	img := nodepod.WithImage("registry.example/upgrader:v1")
	updater := func(o capi.UpdaterOptions) error {
		_, err := capi.NewMachineUpdater(workload, o)
		return err
	}
	kubeadm, err := strategy.ForCategories("kubeadm", strategy.KubeadmCategories()...)
	require.NoError(t, err)
	extension := func(o capi.ExtensionOptions) error {
		_, err := capi.NewExtension(strategy.Updaters(kubeadm), o)
		return err
	}
	for _, tc := range []struct {
		name, option string
		err          error
	}{
		{"retry after below a second", "UpdaterOptions.RetryAfter", updater(capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{img}, RetryAfter: 500 * time.Millisecond})},
		{"retry after not whole seconds", "UpdaterOptions.RetryAfter", updater(capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{img}, RetryAfter: 1500 * time.Millisecond})},
		{"draining without a clientset", "UpdaterOptions.Clientset", updater(capi.UpdaterOptions{PodOptions: []nodepod.Option{img}})},
		{"negative drain attempt", "UpdaterOptions.DrainAttempt", updater(capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{img}, DrainAttempt: -time.Second})},
		{"negative pre-pull timeout", "UpdaterOptions.PrePullTimeout", updater(capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{img}, PrePullTimeout: -time.Second})},
		{"nil gate", "UpdaterOptions.Gates", updater(capi.UpdaterOptions{SkipDrain: true, PodOptions: []nodepod.Option{img}, Gates: []strategy.Gate{nil}})},
		{"image map without versions", "UpdaterOptions.Images", updater(capi.UpdaterOptions{SkipDrain: true, Images: capi.ImagesByVersion{}})},
		{"image map with a bad version", "UpdaterOptions.Images", updater(capi.UpdaterOptions{SkipDrain: true, Images: capi.ImagesByVersion{"v1.36": "img"}})},
		{"no image", "UpdaterOptions.PodOptions", updater(capi.UpdaterOptions{SkipDrain: true})},
		{"no workload client", "NewMachineUpdater", func() error { _, err := capi.NewMachineUpdater(nil, capi.UpdaterOptions{}); return err }()},
		{"failure policy", "ExtensionOptions.FailurePolicy", extension(capi.ExtensionOptions{FailurePolicy: "Sometimes"})},
		{"nil check", "ExtensionOptions.Checks", extension(capi.ExtensionOptions{Checks: []capi.Check{nil}})},
		{"recorder without reader", "ExtensionOptions.EventRecorder", extension(capi.ExtensionOptions{EventRecorder: &events.FakeRecorder{}})},
		{"extension image without an image", "ExtensionOptions.Images", extension(capi.ExtensionOptions{Images: capi.ImagesByVersion{"v1.36.1": " "}})},
		{"no decider", "NewExtension", func() error { _, err := capi.NewExtension(nil, capi.ExtensionOptions{}); return err }()},
		{"negative stale after", "MetricsOptions.StaleAfter", func() error {
			_, err := capi.NewMetrics(prometheus.NewRegistry(), capi.MetricsOptions{StaleAfter: -time.Minute})
			return err
		}()},
		{"an image map on its own", "ImagesByVersion", capi.ImagesByVersion{"v1.36.1": ""}.Validate()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.err, capi.ErrInvalidOption)
			var oe *capi.OptionError
			require.ErrorAs(t, tc.err, &oe)
			require.Equal(t, tc.option, oe.Option, tc.err.Error())
			require.Contains(t, tc.err.Error(), "invalid option: "+tc.option+": ")
		})
	}
}

// TestOptionErrorUnwrapsItsCause: an OptionError about an underlying error
// matches that error too.
func TestOptionErrorUnwrapsItsCause(t *testing.T) {
	cause := errors.New("cause")
	err := error(&capi.OptionError{Option: "Options.X", Detail: "detail", Err: cause})
	require.ErrorIs(t, err, capi.ErrInvalidOption)
	require.ErrorIs(t, err, cause)
	require.Equal(t, "invalid option: Options.X: detail: cause", err.Error())
	require.Equal(t, "invalid option: Options.X", (&capi.OptionError{Option: "Options.X"}).Error())
}
