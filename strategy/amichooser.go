package strategy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/upgradekit/upgradekit/amiselect"
	"github.com/upgradekit/upgradekit/drift"
	"github.com/upgradekit/upgradekit/internal/errtext"
)

// Node labels RequirementsFromLabels reads, as Karpenter sets them.
const (
	// labelArch is the node's architecture.
	labelArch = "kubernetes.io/arch"
	// labelWindowsBuild is a Windows node's build.
	labelWindowsBuild = "node.kubernetes.io/windows-build"
	// labelGPUManufacturer is set on instances with GPUs.
	labelGPUManufacturer = "karpenter.k8s.aws/instance-gpu-manufacturer"
	// labelAcceleratorManufacturer is set on instances with accelerators.
	labelAcceleratorManufacturer = "karpenter.k8s.aws/instance-accelerator-manufacturer"

	gpuManufacturerNvidia = "nvidia"
	acceleratorMakerAWS   = "aws"
)

// ErrNoRequirements is matched by RequirementsFromLabels' error when the
// labels do not say what a node needs of an image (no architecture).
var ErrNoRequirements = errors.New("labels do not name the node's image requirements")

// RequirementsFromLabels reads what a node needs of an image from its
// labels, as Karpenter labels nodes: the architecture (kubernetes.io/arch,
// required), an NVIDIA GPU (karpenter.k8s.aws/instance-gpu-manufacturer
// nvidia: the nvidia variant), an AWS accelerator
// (karpenter.k8s.aws/instance-accelerator-manufacturer aws: neuron), else
// the standard variant, and the Windows build
// (node.kubernetes.io/windows-build).
func RequirementsFromLabels(labels map[string]string) (amiselect.Requirements, error) {
	var r amiselect.Requirements
	switch arch := labels[labelArch]; arch {
	case amiselect.ArchAMD64, amiselect.ArchARM64:
		r.Architecture = arch
	case "":
		return r, fmt.Errorf("%w: label %s is missing", ErrNoRequirements, labelArch)
	default:
		return r, fmt.Errorf("%w: label %s is %s, want %s or %s", ErrNoRequirements, labelArch, errtext.Quote(arch), amiselect.ArchAMD64, amiselect.ArchARM64)
	}
	switch {
	case labels[labelGPUManufacturer] == gpuManufacturerNvidia:
		r.Variant = amiselect.VariantNvidia
	case labels[labelAcceleratorManufacturer] == acceleratorMakerAWS:
		r.Variant = amiselect.VariantNeuron
	}
	r.WindowsBuild = labels[labelWindowsBuild]
	return r, nil
}

// AMIChooser adapts amiselect to drift's image check (drift.NewImage): the
// image a new node with an object's labels would get is the one resolve's
// resolution gives its requirements (RequirementsFromLabels), and the
// reason says why that image won: the selector term that matched, the
// image's name and creation date, and whether it is deprecated (chosen
// only because nothing newer fits). resolve is called for every check, so
// it can resolve again as the catalog changes or return a cached
// resolution; an error from it, or labels without requirements, is an
// error of the check (drift's "cannot tell"), and no fitting image is
// drift.ErrNoImage.
func AMIChooser(resolve func(ctx context.Context) (*amiselect.Resolution, error)) (drift.ImageExplainer, error) {
	if resolve == nil {
		return nil, fmt.Errorf("%w: AMIChooser: nil resolve function", drift.ErrInvalidOption)
	}
	return amiChooser{resolve: resolve}, nil
}

type amiChooser struct {
	resolve func(ctx context.Context) (*amiselect.Resolution, error)
}

func (c amiChooser) ChooseImage(ctx context.Context, labels map[string]string) (string, error) {
	img, _, err := c.ExplainImage(ctx, labels)
	return img, err
}

func (c amiChooser) ExplainImage(ctx context.Context, labels map[string]string) (string, string, error) {
	if c.resolve == nil {
		return "", "", fmt.Errorf("%w: an AMI chooser not made by AMIChooser", drift.ErrInvalidOption)
	}
	reqs, err := RequirementsFromLabels(labels)
	if err != nil {
		return "", "", err
	}
	res, err := c.resolve(ctx)
	if err != nil {
		return "", "", fmt.Errorf("resolving the AMI selector terms: %w", err)
	}
	if res == nil {
		return "", "", fmt.Errorf("%w: resolve returned no resolution", drift.ErrInvalidOption)
	}
	img, ok := res.ImageFor(reqs)
	if !ok {
		return "", "", fmt.Errorf("%w: none of the %d resolved images fits %s", drift.ErrNoImage, len(res.Images), reqs)
	}
	return img.ID, whyImage(res, img, reqs), nil
}

// whyImage says why img is the choice for reqs: amiselect keeps, per
// requirement set, the newest image the terms match, preferring images
// that are not deprecated.
func whyImage(res *amiselect.Resolution, img amiselect.Selected, reqs amiselect.Requirements) string {
	var terms []string
	for _, i := range img.Terms {
		if i >= 0 && i < len(res.Terms) {
			terms = append(terms, fmt.Sprintf("term %d (%s)", i, res.Terms[i]))
		}
	}
	name := img.ID
	if img.Name != "" {
		name += " " + img.Name
	}
	why := fmt.Sprintf("%s matched %s, created %s", strings.Join(terms, " and "), name, img.CreationDate.UTC().Format(time.RFC3339))
	if img.Deprecated {
		why += ", the newest image for " + reqs.String() + "; it is deprecated, chosen because no image that is not fits"
	} else {
		why += ", the newest image that is not deprecated for " + reqs.String()
	}
	// What the same terms passed over (too young for a minimum age, not
	// pinned, ...): a newer image may be among them.
	var skipped []string
	for _, sk := range res.Skipped {
		if sk.Count > 0 && slices.Contains(img.Terms, sk.Term) {
			skipped = append(skipped, sk.String())
		}
	}
	if len(skipped) > 0 {
		const show = 3
		if len(skipped) > show {
			skipped = append(skipped[:show:show], fmt.Sprintf("and %d more", len(skipped)-show))
		}
		why += "; passed over: " + strings.Join(skipped, "; ")
	}
	return errtext.Cap(why)
}
