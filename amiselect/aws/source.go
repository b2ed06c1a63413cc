package aws

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/upgradekit/upgradekit/amiselect"
)

// Sentinel errors, for errors.Is. SDK errors (throttling, access denied,
// ParameterNotFound) are returned wrapped, so errors.As reaches them too.
var (
	// ErrNoClient marks a call on a Source without the EC2 or SSM client it
	// needs (a nil *Source, or New given a nil client).
	ErrNoClient = errors.New("amiselect/aws: no client")
	// ErrInvalidResponse marks an EC2 or SSM answer that cannot be used: a
	// GetParameter response without a value, or an image time stamp that
	// is not RFC 3339.
	ErrInvalidResponse = errors.New("amiselect/aws: invalid response")
)

// EC2API is the part of the EC2 client the source uses (*ec2.Client
// satisfies it).
type EC2API = ec2.DescribeImagesAPIClient

// SSMAPI is the part of the SSM client the source uses (*ssm.Client
// satisfies it).
type SSMAPI interface {
	GetParameter(ctx context.Context, in *ssm.GetParameterInput, optFns ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

// pageSize is the DescribeImages page size Karpenter uses (EC2 allows 5 to
// 1000).
const pageSize = 1000

// Source is an amiselect.ImageSource backed by EC2 and SSM. It is safe for
// concurrent use when its clients are (the SDK's are).
type Source struct {
	ec2 EC2API
	ssm SSMAPI
}

var _ amiselect.ImageSource = (*Source)(nil)

// New returns a Source using the given clients.
func New(ec2api EC2API, ssmapi SSMAPI) *Source { return &Source{ec2: ec2api, ssm: ssmapi} }

// NewFromConfig returns a Source with EC2 and SSM clients built from cfg.
func NewFromConfig(cfg sdkaws.Config) *Source {
	return New(ec2.NewFromConfig(cfg), ssm.NewFromConfig(cfg))
}

// DescribeImages implements amiselect.ImageSource: one DescribeImages call
// per page of 1000 until EC2 returns no next token.
func (s *Source) DescribeImages(ctx context.Context, q amiselect.Query) ([]amiselect.Image, error) {
	if s == nil || s.ec2 == nil {
		return nil, fmt.Errorf("%w: ec2:DescribeImages needs an EC2 client", ErrNoClient)
	}
	in := &ec2.DescribeImagesInput{MaxResults: sdkaws.Int32(pageSize)}
	if len(q.Owners) > 0 {
		in.Owners = append([]string(nil), q.Owners...)
	}
	if q.IncludeDeprecated {
		in.IncludeDeprecated = sdkaws.Bool(true)
	}
	for _, f := range q.Filters {
		in.Filters = append(in.Filters, ec2types.Filter{Name: sdkaws.String(f.Name), Values: append([]string(nil), f.Values...)})
	}
	var out []amiselect.Image
	pages := ec2.NewDescribeImagesPaginator(s.ec2, in)
	for page := 1; pages.HasMorePages(); page++ {
		resp, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("amiselect/aws: ec2:DescribeImages page %d: %w", page, err)
		}
		for i := range resp.Images {
			img, err := convertImage(&resp.Images[i])
			if err != nil {
				return nil, fmt.Errorf("amiselect/aws: ec2:DescribeImages page %d: %w", page, err)
			}
			out = append(out, img)
		}
	}
	return out, nil
}

func convertImage(in *ec2types.Image) (amiselect.Image, error) {
	img := amiselect.Image{
		ID:           sdkaws.ToString(in.ImageId),
		Name:         sdkaws.ToString(in.Name),
		OwnerID:      sdkaws.ToString(in.OwnerId),
		OwnerAlias:   sdkaws.ToString(in.ImageOwnerAlias),
		Architecture: string(in.Architecture),
		State:        string(in.State),
	}
	var err error
	if img.CreationDate, err = parseTime(in.CreationDate); err != nil {
		return amiselect.Image{}, fmt.Errorf("%w: image %s: CreationDate %q: %w", ErrInvalidResponse, img.ID, sdkaws.ToString(in.CreationDate), err)
	}
	if img.DeprecationTime, err = parseTime(in.DeprecationTime); err != nil {
		return amiselect.Image{}, fmt.Errorf("%w: image %s: DeprecationTime %q: %w", ErrInvalidResponse, img.ID, sdkaws.ToString(in.DeprecationTime), err)
	}
	if len(in.Tags) > 0 {
		img.Tags = make(map[string]string, len(in.Tags))
		for _, t := range in.Tags {
			if t.Key == nil {
				continue // a tag without a key is no tag; "" would match tag-key filters for ""
			}
			img.Tags[*t.Key] = sdkaws.ToString(t.Value)
		}
	}
	return img, nil
}

func parseTime(s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339, *s)
}

// GetParameter implements amiselect.ImageSource. SSM's ParameterNotFound is
// returned wrapped together with amiselect.ErrParameterNotFound, so
// errors.Is works for both and errors.As still reaches the SDK error.
func (s *Source) GetParameter(ctx context.Context, name string) (string, error) {
	if s == nil || s.ssm == nil {
		return "", fmt.Errorf("%w: ssm:GetParameter needs an SSM client", ErrNoClient)
	}
	resp, err := s.ssm.GetParameter(ctx, &ssm.GetParameterInput{Name: sdkaws.String(name)})
	if err != nil {
		var nf *ssmtypes.ParameterNotFound
		if errors.As(err, &nf) {
			return "", fmt.Errorf("amiselect/aws: ssm:GetParameter %q: %w: %w", name, amiselect.ErrParameterNotFound, err)
		}
		return "", fmt.Errorf("amiselect/aws: ssm:GetParameter %q: %w", name, err)
	}
	if resp.Parameter == nil || resp.Parameter.Value == nil {
		return "", fmt.Errorf("%w: ssm:GetParameter %q: response has no parameter value", ErrInvalidResponse, name)
	}
	return *resp.Parameter.Value, nil
}
