package amiselect

import (
	"context"
	"time"
)

// ImageSource is where images and SSM parameters come from: EC2 and SSM
// (see the separate module github.com/upgradekit/upgradekit/amiselect/aws),
// an in-memory Catalog, or a Cache around either.
type ImageSource interface {
	// DescribeImages returns every image matching q, with EC2
	// DescribeImages semantics (all pages; order does not matter).
	DescribeImages(ctx context.Context, q Query) ([]Image, error)
	// GetParameter returns the value of an SSM parameter. A missing
	// parameter is reported as an error matching ErrParameterNotFound.
	GetParameter(ctx context.Context, name string) (string, error)
}

// SourceFuncs adapts two functions to ImageSource, like http.HandlerFunc.
// A nil function answers ErrParameterNotFound (GetParameter) or no images.
type SourceFuncs struct {
	// Describe answers DescribeImages; nil answers no images.
	Describe func(ctx context.Context, q Query) ([]Image, error)
	// Parameter answers GetParameter; nil answers ErrParameterNotFound.
	Parameter func(ctx context.Context, name string) (string, error)
}

// DescribeImages calls f.Describe.
func (f SourceFuncs) DescribeImages(ctx context.Context, q Query) ([]Image, error) {
	if f.Describe == nil {
		return nil, nil
	}
	return f.Describe(ctx, q)
}

// GetParameter calls f.Parameter.
func (f SourceFuncs) GetParameter(ctx context.Context, name string) (string, error) {
	if f.Parameter == nil {
		return "", ErrParameterNotFound
	}
	return f.Parameter(ctx, name)
}

// Query is one EC2 DescribeImages request: owners and filters in EC2's own
// vocabulary, so an EC2 adapter passes them through unchanged.
type Query struct {
	// Owners restricts image owners: account ids, "self", "amazon",
	// "aws-marketplace"; empty means any.
	Owners []string `json:"owners,omitempty"`
	// Filters are ANDed EC2 filters.
	Filters []Filter `json:"filters,omitempty"`
	// IncludeDeprecated asks for deprecated images too (EC2 leaves them
	// out by default).
	IncludeDeprecated bool `json:"includeDeprecated,omitempty"`
}

// Filter is one EC2 filter; values are ORed, filters are ANDed. Resolve uses
// the names image-id, name, state, tag:<key> and tag-key.
type Filter struct {
	// Name is the EC2 filter name.
	Name string `json:"name"`
	// Values are ORed; "*" and "?" are wildcards.
	Values []string `json:"values"`
}

// EC2 image states and architectures that matter here.
const (
	StateAvailable = "available"
	EC2ArchX86     = "x86_64"
	EC2ArchARM64   = "arm64"
)

// Image is the part of an EC2 image that selection looks at.
type Image struct {
	// ID is the image id (ami-...).
	ID string `json:"id"`
	// Name is the image name.
	Name string `json:"name,omitempty"`
	// OwnerID is the account that owns the image.
	OwnerID string `json:"ownerId,omitempty"`
	// OwnerAlias is EC2's owner alias ("amazon", "aws-marketplace"), if any.
	OwnerAlias string `json:"ownerAlias,omitempty"`
	// Architecture is EC2's spelling: x86_64, arm64, i386, x86_64_mac, ...
	Architecture string `json:"architecture"`
	// State is EC2's image state; empty is taken as available.
	State string `json:"state,omitempty"`
	// CreationDate is when EC2 says the image was created.
	CreationDate time.Time `json:"creationDate"`
	// Tags are the image's tags.
	Tags map[string]string `json:"tags,omitempty"`
	// DeprecationTime is when the image is (or was) deprecated; zero means
	// never.
	DeprecationTime time.Time `json:"deprecationTime,omitzero"`
}

// Deprecated reports whether the image is deprecated at now (a deprecation
// time at or before now), as Karpenter decides it.
func (i *Image) Deprecated(now time.Time) bool {
	return !i.DeprecationTime.IsZero() && i.DeprecationTime.Unix() <= now.Unix()
}

// kubeArch maps EC2 architectures to Kubernetes ones; others are not usable.
func kubeArch(ec2 string) (string, bool) {
	switch ec2 {
	case EC2ArchX86:
		return ArchAMD64, true
	case EC2ArchARM64:
		return ArchARM64, true
	}
	return "", false
}
