package drift

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageChooser answers "which image would a new node with these labels
// (requirements) get right now?". strategy.AMIChooser adapts an
// amiselect resolution to it (and to ImageExplainer); drift imports
// nothing from this module. It returns
// ErrNoImage (or an error wrapping it) when no image fits.
type ImageChooser interface {
	ChooseImage(ctx context.Context, labels map[string]string) (string, error)
}

// ImageExplainer is an ImageChooser that can also say why it chose:
// which selector term matched, why this image won over the others. The
// Image check uses ExplainImage when its chooser has it, and puts the why
// in the drift reason's message and evidence.
type ImageExplainer interface {
	ImageChooser
	ExplainImage(ctx context.Context, labels map[string]string) (image, why string, err error)
}

// ImageChooserFunc adapts a function to ImageChooser.
type ImageChooserFunc func(ctx context.Context, labels map[string]string) (string, error)

// ChooseImage calls f; a nil f is an ErrInvalidOption error.
func (f ImageChooserFunc) ChooseImage(ctx context.Context, labels map[string]string) (string, error) {
	if f == nil {
		return "", fmt.Errorf("%w: nil ImageChooserFunc", ErrInvalidOption)
	}
	return f(ctx, labels)
}

// Image is the image-drift check: the object's image is not the one a new
// node with the same labels would get. Objects whose image is unknown are
// not drifted. Construct it with NewImage: a zero Image's Check returns
// ErrInvalidOption.
type Image struct {
	chooser  ImageChooser
	imageOf  func(metav1.Object) (string, bool)
	labelsOf func(metav1.Object) map[string]string
	reason   ReasonName
}

// ImageOption configures an Image check.
type ImageOption func(*Image)

// WithImageLabelsOf reads the labels passed to the chooser from somewhere
// other than the object's own labels.
func WithImageLabelsOf(f func(metav1.Object) map[string]string) ImageOption {
	return func(c *Image) { c.labelsOf = f }
}

// WithImageReason sets the reported reason (default ReasonNameAMIDrift).
func WithImageReason(name ReasonName) ImageOption {
	return func(c *Image) { c.reason = name }
}

// NewImage returns an image-drift check. imageOf reads the object's
// current image (e.g. from a label, annotation or status); it reports
// false when the object does not say.
func NewImage(chooser ImageChooser, imageOf func(metav1.Object) (string, bool), opts ...ImageOption) (*Image, error) {
	if chooser == nil || imageOf == nil {
		return nil, fmt.Errorf("%w: image check needs a chooser and an imageOf function", ErrInvalidOption)
	}
	c := &Image{chooser: chooser, imageOf: imageOf, reason: ReasonNameAMIDrift}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	return c, nil
}

// Check implements Check.
func (c *Image) Check(ctx context.Context, obj metav1.Object) (*Reason, error) {
	if c == nil || c.chooser == nil || c.imageOf == nil {
		return nil, fmt.Errorf("%w: Image not constructed with NewImage", ErrInvalidOption)
	}
	if isNilObject(obj) {
		return nil, ErrNilObject
	}
	got, ok := c.imageOf(obj)
	if !ok || got == "" {
		return nil, nil
	}
	labels := obj.GetLabels()
	if c.labelsOf != nil {
		labels = c.labelsOf(obj)
	}
	var want, why string
	var err error
	if ex, ok := c.chooser.(ImageExplainer); ok {
		want, why, err = ex.ExplainImage(ctx, labels)
	} else {
		want, err = c.chooser.ChooseImage(ctx, labels)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImageChooser, err)
	}
	if want == "" {
		return nil, fmt.Errorf("%w: chooser returned no image", ErrNoImage)
	}
	if want == got {
		return nil, nil
	}
	msg := fmt.Sprintf("image %s is not the current choice %s for this node's requirements", got, want)
	if why != "" {
		msg += ": " + why
	}
	return &Reason{
		Name:     c.reason,
		Message:  msg,
		Evidence: []Evidence{{Kind: EvidenceKindImage, Key: "image", Want: want, Got: got, Detail: why}},
	}, nil
}
