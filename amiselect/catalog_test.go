package amiselect

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func describeIDs(t *testing.T, c *Catalog, q Query) []string {
	t.Helper()
	imgs, err := c.DescribeImages(context.Background(), q)
	require.NoError(t, err)
	out := []string{}
	for _, i := range imgs {
		out = append(out, i.ID)
	}
	return out
}

func TestCatalogFilters(t *testing.T) {
	c := newTestCatalog(t,
		img("ami-1", "app-1.0", day(1), tags("team", "a", "env", "prod")),
		img("ami-2", "app-1.1", day(2), arm, tags("team", "b")),
		img("ami-3", "base?x", day(3), owner("137112412989", "amazon"), tags("env", "dev")),
		img("ami-4", "app-2.0", day(4), owner("999988887777", ""), deprecatedAt(day(20))),
		img("ami-5", "app*literal", day(5), state("pending")),
	)
	f := func(name string, values ...string) Filter { return Filter{Name: name, Values: values} }
	tests := []struct {
		name string
		q    Query
		want []string
	}{
		{"everything, deprecated excluded by default", Query{}, []string{"ami-1", "ami-2", "ami-3", "ami-5"}},
		{"include deprecated", Query{IncludeDeprecated: true}, []string{"ami-1", "ami-2", "ami-3", "ami-4", "ami-5"}},
		{"ids", Query{Filters: []Filter{f("image-id", "ami-3", "ami-1", "ami-404")}}, []string{"ami-1", "ami-3"}},
		{"name prefix wildcard", Query{Filters: []Filter{f("name", "app-1.*")}}, []string{"ami-1", "ami-2"}},
		{"name question mark", Query{Filters: []Filter{f("name", "app-?.0")}, IncludeDeprecated: true}, []string{"ami-1", "ami-4"}},
		{"name inner wildcard", Query{Filters: []Filter{f("name", "*-1.1")}}, []string{"ami-2"}},
		{"escaped wildcard is literal", Query{Filters: []Filter{f("name", `app\*literal`)}}, []string{"ami-5"}},
		{"escaped question mark", Query{Filters: []Filter{f("name", `base\?x`)}}, []string{"ami-3"}},
		{"values OR", Query{Filters: []Filter{f("name", "app-1.0", "base*")}}, []string{"ami-1", "ami-3"}},
		{"filters AND", Query{Filters: []Filter{f("name", "app-*"), f("tag:team", "a")}}, []string{"ami-1"}},
		{"tag value wildcard", Query{Filters: []Filter{f("tag:env", "*")}}, []string{"ami-1", "ami-3"}},
		{"tag-key", Query{Filters: []Filter{f("tag-key", "team")}}, []string{"ami-1", "ami-2"}},
		{"tag-key wildcard", Query{Filters: []Filter{f("tag-key", "t*")}}, []string{"ami-1", "ami-2"}},
		{"state", Query{Filters: []Filter{f("state", "available")}}, []string{"ami-1", "ami-2", "ami-3"}},
		{"architecture", Query{Filters: []Filter{f("architecture", "arm64")}}, []string{"ami-2"}},
		{"owner self", Query{Owners: []string{"self"}}, []string{"ami-1", "ami-2", "ami-5"}},
		{"owner amazon", Query{Owners: []string{"amazon"}}, []string{"ami-3"}},
		{"owner account", Query{Owners: []string{"999988887777"}, IncludeDeprecated: true}, []string{"ami-4"}},
		{"owners OR", Query{Owners: []string{"self", "amazon"}, Filters: []Filter{f("name", "*")}}, []string{"ami-1", "ami-2", "ami-3", "ami-5"}},
		{"owner-alias filter", Query{Filters: []Filter{f("owner-alias", "amazon")}}, []string{"ami-3"}},
		{"owner-id filter", Query{Filters: []Filter{f("owner-id", selfAccount)}}, []string{"ami-1", "ami-2", "ami-5"}},
		{"nothing", Query{Filters: []Filter{f("tag:team", "z")}}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, describeIDs(t, c, tt.q))
		})
	}
}

func TestCatalogSelfWithoutAccount(t *testing.T) {
	c, err := NewCatalog([]Image{img("ami-1", "a", day(1))})
	require.NoError(t, err)
	require.Equal(t, []string{}, describeIDs(t, c, Query{Owners: []string{"self"}}))
}

func TestCatalogBadQuery(t *testing.T) {
	c := newTestCatalog(t, img("ami-1", "a", day(1)))
	_, err := c.DescribeImages(context.Background(), Query{Filters: []Filter{{Name: "is-public", Values: []string{"true"}}}})
	require.ErrorIs(t, err, ErrInvalidQuery)
	require.Contains(t, err.Error(), "Filters[0].Name")
	_, err = c.DescribeImages(context.Background(), Query{Filters: []Filter{{Name: "name"}}})
	require.ErrorIs(t, err, ErrInvalidQuery)
	_, err = c.DescribeImages(context.Background(), Query{Filters: []Filter{{Name: "tag:", Values: []string{"x"}}}})
	require.ErrorIs(t, err, ErrInvalidQuery)
}

func TestNewCatalogRejects(t *testing.T) {
	_, err := NewCatalog([]Image{img("ami-1", "a", day(1)), img("ami-1", "b", day(1))})
	require.ErrorIs(t, err, ErrInvalidCatalog)
	require.Contains(t, err.Error(), "Images[1].ImageId")
	require.Contains(t, err.Error(), "duplicate of Images[0]")
	_, err = NewCatalog([]Image{{ID: ""}})
	require.ErrorIs(t, err, ErrInvalidCatalog)
}

func TestCatalogParameters(t *testing.T) {
	c := newTestCatalog(t)
	c.SetParameter("/p", "ami-1")
	v, err := c.GetParameter(context.Background(), "/p")
	require.NoError(t, err)
	require.Equal(t, "ami-1", v)
	c.DeleteParameter("/p")
	_, err = c.GetParameter(context.Background(), "/p")
	require.ErrorIs(t, err, ErrParameterNotFound)
}

const describeImagesJSON = `{
  "Images": [
    {
      "Architecture": "x86_64",
      "CreationDate": "2024-08-07T21:10:08.000Z",
      "ImageId": "ami-0a1b2c3d4e5f60718",
      "ImageLocation": "amazon/amazon-eks-node-al2023-x86_64-standard-1.30-v20240807",
      "ImageType": "machine",
      "Public": true,
      "OwnerId": "602401143452",
      "PlatformDetails": "Linux/UNIX",
      "State": "available",
      "Name": "amazon-eks-node-al2023-x86_64-standard-1.30-v20240807",
      "ImageOwnerAlias": "amazon",
      "DeprecationTime": "2026-08-07T21:10:08.000Z",
      "Tags": [{"Key": "release", "Value": "v20240807"}, {"Key": "flag"}]
    },
    {
      "Architecture": "arm64",
      "CreationDate": "2024-08-07T21:12:00.000Z",
      "ImageId": "ami-0f1e2d3c4b5a69788",
      "OwnerId": "602401143452",
      "State": "available",
      "Name": "amazon-eks-node-al2023-arm64-standard-1.30-v20240807"
    }
  ],
  "Parameters": [
    {"Name": "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id", "Value": "ami-0a1b2c3d4e5f60718"}
  ]
}`

func TestLoadCatalog(t *testing.T) {
	c, err := LoadCatalog(strings.NewReader(describeImagesJSON))
	require.NoError(t, err)
	imgs, err := c.DescribeImages(context.Background(), Query{IncludeDeprecated: true})
	require.NoError(t, err)
	require.Len(t, imgs, 2)
	first := imgs[0]
	require.Equal(t, "ami-0a1b2c3d4e5f60718", first.ID)
	require.Equal(t, "amazon", first.OwnerAlias)
	require.Equal(t, "602401143452", first.OwnerID)
	require.Equal(t, "2024-08-07T21:10:08Z", first.CreationDate.Format("2006-01-02T15:04:05Z07:00"))
	require.Equal(t, 2026, first.DeprecationTime.Year())
	require.Equal(t, map[string]string{"release": "v20240807", "flag": ""}, first.Tags)
	v, err := c.GetParameter(context.Background(), "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id")
	require.NoError(t, err)
	require.Equal(t, "ami-0a1b2c3d4e5f60718", v)
}

func TestLoadCatalogMalformed(t *testing.T) {
	tests := []struct {
		name, in, wantPath string
	}{
		{"empty", ``, ""},
		{"not json", `{"Images": [`, ""},
		{"syntax error", `{"Images": [}`, "offset"},
		{"wrong type", `{"Images": {"ImageId": "ami-1"}}`, "Images"},
		{"number for id", `{"Images": [{"ImageId": 7}]}`, "Images.ImageId"},
		{"missing id", `{"Images": [{"Name": "x"}]}`, "Images[0].ImageId"},
		{"bad id", `{"Images": [{"ImageId": "img-1"}]}`, "Images[0].ImageId"},
		{"duplicate id", `{"Images": [{"ImageId": "ami-1"}, {"ImageId": "ami-1"}]}`, "Images[1].ImageId"},
		{"bad creation date", `{"Images": [{"ImageId": "ami-1", "CreationDate": "yesterday"}]}`, "Images[0].CreationDate"},
		{"bad deprecation time", `{"Images": [{"ImageId": "ami-1", "DeprecationTime": "2024-13-01T00:00:00Z"}]}`, "Images[0].DeprecationTime"},
		{"missing tag key", `{"Images": [{"ImageId": "ami-1", "Tags": [{"Value": "v"}]}]}`, "Images[0].Tags[0].Key"},
		{"duplicate tag key", `{"Images": [{"ImageId": "ami-1", "Tags": [{"Key": "k"}, {"Key": "k"}]}]}`, "Images[0].Tags[1].Key"},
		{"parameter without name", `{"Images": [], "Parameters": [{"Value": "ami-1"}]}`, "Parameters[0].Name"},
		{"trailing data", `{"Images": []} {}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadCatalog(strings.NewReader(tt.in))
			require.ErrorIs(t, err, ErrInvalidCatalog)
			var e *Error
			require.True(t, errors.As(err, &e))
			require.Contains(t, e.Path, tt.wantPath)
		})
	}
}

// globToRegexp is an independent reference for EC2 wildcard semantics.
func globToRegexp(p string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 < len(p) {
				i++
				b.WriteString(regexp.QuoteMeta(p[i : i+1]))
			} else {
				b.WriteString(`\\`)
			}
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile("(?s)" + b.String())
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "abc", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbb", false},
		{"*b*", "abc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"?", "é", true},
		{"*??", "€", false},
		{"*??", "a€", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{`a\`, `a\`, true},
		{"**a", "bba", true},
		{"a*b*c*d", "axxbyyczzd", true},
		{"a*b*c*d", "axxbyyczz", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, globMatch(tt.p, tt.s), "%q ~ %q", tt.p, tt.s)
		require.Equal(t, tt.want, globToRegexp(tt.p).MatchString(tt.s), "reference %q ~ %q", tt.p, tt.s)
	}
}

func TestCatalogZeroValue(t *testing.T) {
	var c Catalog
	ctx := context.Background()
	imgs, err := c.DescribeImages(ctx, Query{Owners: []string{"self"}, Filters: []Filter{{Name: "name", Values: []string{"*"}}}})
	require.NoError(t, err)
	require.Empty(t, imgs)
	_, err = c.GetParameter(ctx, "/p")
	require.ErrorIs(t, err, ErrParameterNotFound)
	c.SetParameter("/p", "ami-1")
	v, err := c.GetParameter(ctx, "/p")
	require.NoError(t, err)
	require.Equal(t, "ami-1", v)
	c.DeleteParameter("/p")
	_, err = c.GetParameter(ctx, "/p")
	require.ErrorIs(t, err, ErrParameterNotFound)
}
