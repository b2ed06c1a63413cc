package aws

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/upgradekit/upgradekit/amiselect"
)

const (
	fakeKeyID  = "AKIDUPGRADEKITTEST"
	fakeSecret = "upgradekit-test-secret"
	region     = "us-west-2"
)

// fakeAWS answers the EC2 Query API (DescribeImages, XML) and the SSM JSON
// 1.1 API (GetParameter) the way AWS documents them. Images are filtered by
// an amiselect.Catalog and paged pageSize at a time with opaque tokens.
type fakeAWS struct {
	t        *testing.T
	catalog  *amiselect.Catalog
	pageSize int

	mu            sync.Mutex
	ec2Throttles  int // answer this many DescribeImages calls with RequestLimitExceeded first
	ssmThrottles  int // and this many GetParameter calls with ThrottlingException
	ec2Requests   []url.Values
	ssmRequests   []string
	failAfterPage int // when > 0, fail the request for the page after this one with an internal error
}

func (f *fakeAWS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential="+fakeKeyID+"/") || !strings.Contains(auth, "/"+region+"/") {
		f.t.Errorf("request not signed with the static test credentials for %s: %q", region, auth)
		http.Error(w, "unsigned", http.StatusForbidden)
		return
	}
	if target := r.Header.Get("X-Amz-Target"); target != "" {
		f.serveSSM(w, r, target)
		return
	}
	f.serveEC2(w, r)
}

type ec2Tag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

type ec2Image struct {
	ImageID         string   `xml:"imageId"`
	ImageLocation   string   `xml:"imageLocation"`
	ImageState      string   `xml:"imageState"`
	ImageOwnerID    string   `xml:"imageOwnerId"`
	CreationDate    string   `xml:"creationDate"`
	IsPublic        bool     `xml:"isPublic"`
	Architecture    string   `xml:"architecture"`
	ImageType       string   `xml:"imageType"`
	Name            string   `xml:"name"`
	ImageOwnerAlias string   `xml:"imageOwnerAlias,omitempty"`
	DeprecationTime string   `xml:"deprecationTime,omitempty"`
	Tags            []ec2Tag `xml:"tagSet>item"`
}

type describeImagesResponse struct {
	XMLName   xml.Name   `xml:"http://ec2.amazonaws.com/doc/2016-11-15/ DescribeImagesResponse"`
	RequestID string     `xml:"requestId"`
	Images    []ec2Image `xml:"imagesSet>item"`
	NextToken string     `xml:"nextToken,omitempty"`
}

func ec2Error(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>`, code, message)
}

// queryFromForm decodes DescribeImages' flattened Query API parameters
// (Owner.N, Filter.N.Name, Filter.N.Value.M, IncludeDeprecated).
func queryFromForm(form url.Values) (amiselect.Query, error) {
	var q amiselect.Query
	for i := 1; ; i++ {
		v := form.Get(fmt.Sprintf("Owner.%d", i))
		if v == "" {
			break
		}
		q.Owners = append(q.Owners, v)
	}
	for i := 1; ; i++ {
		name := form.Get(fmt.Sprintf("Filter.%d.Name", i))
		if name == "" {
			break
		}
		f := amiselect.Filter{Name: name}
		for j := 1; ; j++ {
			v, ok := form[fmt.Sprintf("Filter.%d.Value.%d", i, j)]
			if !ok {
				break
			}
			f.Values = append(f.Values, v[0])
		}
		q.Filters = append(q.Filters, f)
	}
	if d := form.Get("IncludeDeprecated"); d != "" {
		b, err := strconv.ParseBool(d)
		if err != nil {
			return q, err
		}
		q.IncludeDeprecated = b
	}
	return q, nil
}

func (f *fakeAWS) serveEC2(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		ec2Error(w, http.StatusBadRequest, "InvalidAction", "expected a form POST")
		return
	}
	if err := r.ParseForm(); err != nil {
		ec2Error(w, http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	}
	if r.Form.Get("Action") != "DescribeImages" || r.Form.Get("Version") != "2016-11-15" {
		ec2Error(w, http.StatusBadRequest, "InvalidAction", "The action "+r.Form.Get("Action")+" is not valid for this web service.")
		return
	}
	f.mu.Lock()
	f.ec2Requests = append(f.ec2Requests, r.Form)
	throttle := f.ec2Throttles > 0
	if throttle {
		f.ec2Throttles--
	}
	failAfter := f.failAfterPage
	f.mu.Unlock()
	if throttle {
		ec2Error(w, http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
		return
	}
	if mr, err := strconv.Atoi(r.Form.Get("MaxResults")); err != nil || mr < 5 || mr > 1000 {
		ec2Error(w, http.StatusBadRequest, "InvalidParameterValue", "MaxResults must be between 5 and 1000")
		return
	}
	q, err := queryFromForm(r.Form)
	if err != nil {
		ec2Error(w, http.StatusBadRequest, "InvalidParameterValue", err.Error())
		return
	}
	imgs, err := f.catalog.DescribeImages(r.Context(), q)
	if err != nil {
		ec2Error(w, http.StatusBadRequest, "InvalidParameterValue", err.Error())
		return
	}
	start := 0
	if tok := r.Form.Get("NextToken"); tok != "" {
		if start, err = strconv.Atoi(strings.TrimPrefix(tok, "page-")); err != nil || start <= 0 || start > len(imgs) {
			ec2Error(w, http.StatusBadRequest, "InvalidPaginationToken", "The pagination token is invalid")
			return
		}
	}
	if failAfter > 0 && start >= failAfter*f.pageSize {
		ec2Error(w, http.StatusInternalServerError, "InternalError", "An internal error has occurred")
		return
	}
	end := min(start+f.pageSize, len(imgs))
	resp := describeImagesResponse{RequestID: "59dbff89-35bd-4eac-99ed-be587example"}
	for _, img := range imgs[start:end] {
		e := ec2Image{
			ImageID: img.ID, ImageLocation: img.OwnerID + "/" + img.Name, ImageState: img.State, ImageOwnerID: img.OwnerID,
			CreationDate: img.CreationDate.UTC().Format("2006-01-02T15:04:05.000Z"), IsPublic: img.OwnerAlias == "amazon",
			Architecture: img.Architecture, ImageType: "machine", Name: img.Name, ImageOwnerAlias: img.OwnerAlias,
		}
		if !img.DeprecationTime.IsZero() {
			e.DeprecationTime = img.DeprecationTime.UTC().Format("2006-01-02T15:04:05.000Z")
		}
		for k, v := range img.Tags {
			e.Tags = append(e.Tags, ec2Tag{k, v})
		}
		resp.Images = append(resp.Images, e)
	}
	if end < len(imgs) {
		resp.NextToken = "page-" + strconv.Itoa(end)
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = io.WriteString(w, xml.Header)
	if err := xml.NewEncoder(w).Encode(resp); err != nil {
		f.t.Errorf("encoding response: %v", err)
	}
}

func ssmError(w http.ResponseWriter, code, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": message})
}

func (f *fakeAWS) serveSSM(w http.ResponseWriter, r *http.Request, target string) {
	if target != "AmazonSSM.GetParameter" || r.Header.Get("Content-Type") != "application/x-amz-json-1.1" {
		ssmError(w, "UnknownOperationException", "unknown operation "+target)
		return
	}
	var in struct {
		Name           string
		WithDecryption *bool
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		ssmError(w, "SerializationException", err.Error())
		return
	}
	f.mu.Lock()
	f.ssmRequests = append(f.ssmRequests, in.Name)
	throttle := f.ssmThrottles > 0
	if throttle {
		f.ssmThrottles--
	}
	f.mu.Unlock()
	if throttle {
		ssmError(w, "ThrottlingException", "Rate exceeded")
		return
	}
	v, err := f.catalog.GetParameter(r.Context(), in.Name)
	if err != nil {
		ssmError(w, "ParameterNotFound", "")
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{
		"ARN":              "arn:aws:ssm:" + region + "::parameter" + in.Name,
		"DataType":         "aws:ec2:image",
		"LastModifiedDate": 1.7231e9,
		"Name":             in.Name,
		"Type":             "String",
		"Value":            v,
		"Version":          42,
	}})
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// newFixture starts the fake on 127.0.0.1 and returns a Source whose SDK
// clients point at it with static fake credentials and a fast retryer (3
// attempts, no back-off wait).
func newFixture(t *testing.T, images ...amiselect.Image) (*Source, *fakeAWS, *amiselect.Catalog) {
	t.Helper()
	cat, err := amiselect.NewCatalog(images, amiselect.WithAccountID("111122223333"), amiselect.WithClock(clocktesting.NewFakePassiveClock(t0.AddDate(0, 0, 30))))
	require.NoError(t, err)
	fake := &fakeAWS{t: t, catalog: cat, pageSize: 2}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	cfg := sdkaws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(fakeKeyID, fakeSecret, ""),
		HTTPClient:  srv.Client(),
		Retryer: func() sdkaws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 3
				o.MaxBackoff = time.Millisecond
				o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
				o.RateLimiter = ratelimit.None
			})
		},
	}
	ec2c := ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = sdkaws.String(srv.URL) })
	ssmc := ssm.NewFromConfig(cfg, func(o *ssm.Options) { o.BaseEndpoint = sdkaws.String(srv.URL) })
	return New(ec2c, ssmc), fake, cat
}

func image(id, name string, day int, mods ...func(*amiselect.Image)) amiselect.Image {
	i := amiselect.Image{ID: id, Name: name, OwnerID: "111122223333", Architecture: "x86_64", State: "available", CreationDate: t0.AddDate(0, 0, day)}
	for _, m := range mods {
		m(&i)
	}
	return i
}

func TestDescribeImagesPagingAndWireFormat(t *testing.T) {
	var imgs []amiselect.Image
	for i := 0; i < 7; i++ {
		imgs = append(imgs, image(fmt.Sprintf("ami-%04d", i), fmt.Sprintf("app-%d", i), i, func(im *amiselect.Image) {
			im.Tags = map[string]string{"team": "web", "Name": im.Name}
		}))
	}
	imgs = append(imgs, image("ami-arm", "app-arm", 9, func(im *amiselect.Image) {
		im.Architecture, im.OwnerID, im.OwnerAlias = "arm64", "137112412989", "amazon"
		im.DeprecationTime = t0.AddDate(1, 0, 0)
	}))
	src, fake, cat := newFixture(t, imgs...)

	q := amiselect.Query{
		Owners:            []string{"self", "amazon"},
		Filters:           []amiselect.Filter{{Name: "name", Values: []string{"app-*"}}, {Name: "tag-key", Values: []string{"team"}}},
		IncludeDeprecated: true,
	}
	got, err := src.DescribeImages(context.Background(), q)
	require.NoError(t, err)
	want, err := cat.DescribeImages(context.Background(), q)
	require.NoError(t, err)
	require.Len(t, got, 7)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("images through the SDK differ from the catalog (-want +got):\n%s", d)
	}
	require.Len(t, fake.ec2Requests, 4, "7 images at 2 per page")
	first := fake.ec2Requests[0]
	require.Equal(t, "self", first.Get("Owner.1"))
	require.Equal(t, "amazon", first.Get("Owner.2"))
	require.Equal(t, "name", first.Get("Filter.1.Name"))
	require.Equal(t, "app-*", first.Get("Filter.1.Value.1"))
	require.Equal(t, "tag-key", first.Get("Filter.2.Name"))
	require.Equal(t, "true", first.Get("IncludeDeprecated"))
	require.Equal(t, "1000", first.Get("MaxResults"))
	require.Empty(t, first.Get("NextToken"))
	require.Equal(t, "page-2", fake.ec2Requests[1].Get("NextToken"))
	require.Equal(t, "page-6", fake.ec2Requests[3].Get("NextToken"))

	// Deprecated images stay out unless asked for.
	got, err = src.DescribeImages(context.Background(), amiselect.Query{Filters: []amiselect.Filter{{Name: "image-id", Values: []string{"ami-arm"}}}})
	require.NoError(t, err)
	require.Len(t, got, 1, "deprecation in a year: not deprecated yet")
	require.Equal(t, "amazon", got[0].OwnerAlias)
	require.Equal(t, t0.AddDate(1, 0, 0), got[0].DeprecationTime)
	require.Empty(t, fake.ec2Requests[len(fake.ec2Requests)-1].Get("IncludeDeprecated"))
}

func TestDescribeImagesErrors(t *testing.T) {
	src, fake, _ := newFixture(t, image("ami-1", "a", 1), image("ami-2", "b", 2), image("ami-3", "c", 3))
	ctx := context.Background()

	// Throttled twice, then answered: the SDK's retryer absorbs it.
	fake.ec2Throttles = 2
	got, err := src.DescribeImages(ctx, amiselect.Query{})
	require.NoError(t, err)
	require.Len(t, got, 3)

	// Throttled past the retry budget: the EC2 error code reaches the caller.
	fake.ec2Throttles = 10
	_, err = src.DescribeImages(ctx, amiselect.Query{})
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, "RequestLimitExceeded", apiErr.ErrorCode())
	require.Contains(t, err.Error(), "ec2:DescribeImages page 1")
	fake.ec2Throttles = 0

	// A failure on a later page is not a short answer.
	fake.failAfterPage = 1
	_, err = src.DescribeImages(ctx, amiselect.Query{})
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "InternalError", apiErr.ErrorCode())
	require.Contains(t, err.Error(), "page 2")
	fake.failAfterPage = 0

	// An unknown filter is EC2's InvalidParameterValue.
	_, err = src.DescribeImages(ctx, amiselect.Query{Filters: []amiselect.Filter{{Name: "no-such-filter", Values: []string{"x"}}}})
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "InvalidParameterValue", apiErr.ErrorCode())

	// Cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = src.DescribeImages(cctx, amiselect.Query{})
	require.ErrorIs(t, err, context.Canceled)

	// Missing clients are an error, not a panic.
	_, err = New(nil, nil).DescribeImages(ctx, amiselect.Query{})
	require.Error(t, err)
	_, err = New(nil, nil).GetParameter(ctx, "/p")
	require.Error(t, err)
}

func TestGetParameter(t *testing.T) {
	src, fake, cat := newFixture(t, image("ami-1", "a", 1))
	cat.SetParameter("/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", "ami-1")
	ctx := context.Background()

	v, err := src.GetParameter(ctx, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id")
	require.NoError(t, err)
	require.Equal(t, "ami-1", v)

	_, err = src.GetParameter(ctx, "/does/not/exist")
	require.ErrorIs(t, err, amiselect.ErrParameterNotFound)
	var nf *ssmtypes.ParameterNotFound
	require.True(t, errors.As(err, &nf), "the SDK's typed error is still reachable: %v", err)

	fake.ssmThrottles = 1
	v, err = src.GetParameter(ctx, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id")
	require.NoError(t, err)
	require.Equal(t, "ami-1", v)

	fake.ssmThrottles = 10
	_, err = src.GetParameter(ctx, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id")
	require.NotErrorIs(t, err, amiselect.ErrParameterNotFound)
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "ThrottlingException", apiErr.ErrorCode())
}

// End to end: an alias resolved through the SDK against the fake, with a
// missing parameter (arm64 nvidia), an SSM throttle the retryer absorbs, and
// a cache in front.
func TestResolveThroughSDK(t *testing.T) {
	amazon := func(im *amiselect.Image) { im.OwnerID, im.OwnerAlias = "602401143452", "amazon" }
	src, fake, cat := newFixture(t,
		image("ami-std", "al2023-x86-standard", 10, amazon),
		image("ami-nv", "al2023-x86-nvidia", 10, amazon),
		image("ami-neu", "al2023-x86-neuron", 10, amazon),
		image("ami-arm", "al2023-arm-standard", 10, amazon, func(im *amiselect.Image) { im.Architecture = "arm64" }),
	)
	base := "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/"
	cat.SetParameter(base+"x86_64/standard/recommended/image_id", "ami-std")
	cat.SetParameter(base+"x86_64/nvidia/recommended/image_id", "ami-nv")
	cat.SetParameter(base+"x86_64/neuron/recommended/image_id", "ami-neu")
	cat.SetParameter(base+"arm64/standard/recommended/image_id", "ami-arm")
	fake.ssmThrottles = 1

	cache := amiselect.NewCache(src)
	res, err := amiselect.Resolve(context.Background(), cache, []amiselect.Term{{Alias: "al2023@latest"}}, amiselect.WithKubernetesVersion("1.31"))
	require.NoError(t, err)
	require.Len(t, res.Images, 4)
	img, ok := res.ImageFor(amiselect.Requirements{Architecture: amiselect.ArchAMD64, Variant: amiselect.VariantNvidia})
	require.True(t, ok)
	require.Equal(t, "ami-nv", img.ID)
	require.Equal(t, []amiselect.Skip{{Term: 0, Parameter: base + "arm64/nvidia/recommended/image_id", Reason: "SSM parameter not found"}}, res.Skipped)

	// The image query carried all four ids and the state filter; a second
	// resolution is served from the cache.
	n := len(fake.ec2Requests)
	require.Equal(t, "image-id", fake.ec2Requests[0].Get("Filter.1.Name"))
	require.Equal(t, "state", fake.ec2Requests[0].Get("Filter.2.Name"))
	require.Equal(t, "available", fake.ec2Requests[0].Get("Filter.2.Value.1"))
	_, err = amiselect.Resolve(context.Background(), cache, []amiselect.Term{{Alias: "al2023@latest"}}, amiselect.WithKubernetesVersion("1.31"))
	require.NoError(t, err)
	require.Equal(t, n, len(fake.ec2Requests))
}

func TestConvertImageBadDate(t *testing.T) {
	bad := "last tuesday"
	_, err := convertImage(&ec2types.Image{ImageId: sdkaws.String("ami-1"), CreationDate: &bad})
	require.ErrorContains(t, err, `image ami-1: CreationDate "last tuesday"`)
	require.ErrorIs(t, err, ErrInvalidResponse)
	_, err = convertImage(&ec2types.Image{ImageId: sdkaws.String("ami-1"), DeprecationTime: &bad})
	require.ErrorIs(t, err, ErrInvalidResponse)
}

func TestConvertImageSkipsTagsWithoutKey(t *testing.T) {
	img, err := convertImage(&ec2types.Image{ImageId: sdkaws.String("ami-1"), Tags: []ec2types.Tag{
		{Key: nil, Value: sdkaws.String("orphan")},
		{Key: sdkaws.String("team"), Value: sdkaws.String("a")},
		{Key: sdkaws.String("empty"), Value: nil},
	}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"team": "a", "empty": ""}, img.Tags)
}

// ssmFunc adapts a function to SSMAPI.
type ssmFunc func(ctx context.Context, in *ssm.GetParameterInput, optFns ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)

func (f ssmFunc) GetParameter(ctx context.Context, in *ssm.GetParameterInput, optFns ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
	return f(ctx, in, optFns...)
}

func TestTypedErrors(t *testing.T) {
	ctx := context.Background()
	for name, src := range map[string]*Source{"nil Source": nil, "no clients": New(nil, nil)} {
		t.Run(name, func(t *testing.T) {
			_, err := src.DescribeImages(ctx, amiselect.Query{})
			require.ErrorIs(t, err, ErrNoClient)
			require.ErrorContains(t, err, "EC2")
			_, err = src.GetParameter(ctx, "/p")
			require.ErrorIs(t, err, ErrNoClient)
			require.ErrorContains(t, err, "SSM")
		})
	}
	for name, out := range map[string]*ssm.GetParameterOutput{
		"no parameter": {},
		"no value":     {Parameter: &ssmtypes.Parameter{Name: sdkaws.String("/p")}},
	} {
		t.Run(name, func(t *testing.T) {
			src := New(nil, ssmFunc(func(context.Context, *ssm.GetParameterInput, ...func(*ssm.Options)) (*ssm.GetParameterOutput, error) {
				return out, nil
			}))
			_, err := src.GetParameter(ctx, "/p")
			require.ErrorIs(t, err, ErrInvalidResponse)
			require.NotErrorIs(t, err, amiselect.ErrParameterNotFound)
			require.ErrorContains(t, err, `"/p"`)
		})
	}
}
