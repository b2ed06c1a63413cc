package nodeexec

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// randomJournal fills every field of a Journal, through reflection so a
// field added later is covered too: strings of any bytes (JSON and HTML
// escapes, invalid UTF-8, U+2028), zero and non-zero times in several
// zones, with and without a monotonic reading, nil, empty and full slices
// and pointers.
func randomJournal(r *rand.Rand) Journal {
	var j Journal
	fillRandom(r, reflect.ValueOf(&j).Elem())
	return j
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	randomZones  = []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+30*60), time.FixedZone("minus", -8*3600)}
	randomString = []string{"", "a", "<script>&amp;</script>", "\xff\xfe", "line\nbreak\t\"quoted\"\\", "\u2028\u2029", "é日本", "\x00\x1f\x7f", "\b\f\r"}
)

func fillRandom(r *rand.Rand, v reflect.Value) {
	if v.Type() == timeType {
		var t time.Time
		switch r.IntN(6) {
		case 0: // zero
		case 1: // the zero instant in another zone: IsZero, omitted
			t = time.Time{}.In(randomZones[1])
		case 2: // with a monotonic reading
			t = time.Now()
		default:
			t = time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(randomZones[r.IntN(len(randomZones))])
		}
		v.Set(reflect.ValueOf(t))
		return
	}
	switch v.Kind() {
	case reflect.String:
		if r.IntN(3) == 0 {
			b := make([]byte, r.IntN(12))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			v.SetString(string(b))
			return
		}
		v.SetString(randomString[r.IntN(len(randomString))])
	case reflect.Int:
		v.SetInt([]int64{0, 1, -1, 137, -1 << 62}[r.IntN(5)])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Struct:
		for i := range v.NumField() {
			fillRandom(r, v.Field(i))
		}
	case reflect.Pointer:
		if r.IntN(3) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fillRandom(r, v.Elem())
		}
	case reflect.Slice:
		if n := r.IntN(5) - 1; n >= 0 {
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := range n {
				fillRandom(r, v.Index(i))
			}
		}
	default:
		panic("fillRandom: no case for " + v.Type().String())
	}
}

// checkMarshalJournal: marshalJournal(j) is json.Marshal(j) and a
// newline, or json.Marshal's error.
func checkMarshalJournal(t *testing.T, j Journal) {
	t.Helper()
	want, wantErr := json.Marshal(j)
	got, err := marshalJournal(j)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error())
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want)+"\n", string(got))
}

// TestMarshalJournalIsJSONMarshal: the runner's encoding of a journal is
// json.Marshal's and a newline, byte for byte, for every field and value,
// and fails where json.Marshal fails, with its error.
func TestMarshalJournalIsJSONMarshal(t *testing.T) {
	checkMarshalJournal(t, Journal{})
	checkMarshalJournal(t, newJournal(threeStepPlan(), "fp"))

	// Every byte, and every rune up to U+2FFF, in every string field.
	var all strings.Builder
	for c := range 256 {
		all.WriteByte(byte(c))
	}
	for c := rune(0x80); c < 0x3000; c++ {
		all.WriteRune(c)
	}
	j := newJournal(threeStepPlan(), all.String())
	j.Plan, j.Node, j.State = all.String(), all.String(), PlanState(all.String())
	j.Steps[0] = StepRecord{Name: all.String(), State: StepState(all.String()), Output: all.String(), Note: all.String()}
	j.Failure = &Failure{Step: all.String(), Phase: Phase(all.String()), Output: all.String(), Error: all.String()}
	checkMarshalJournal(t, j)

	r := rand.New(rand.NewPCG(35, 1))
	for range 5000 {
		checkMarshalJournal(t, randomJournal(r))
	}

	// Times RFC 3339 cannot hold: json.Marshal's error.
	for _, bad := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 25*3600)),
	} {
		j := newJournal(threeStepPlan(), "fp")
		j.Steps[1].Finished = bad
		_, err := json.Marshal(j)
		require.Error(t, err)
		checkMarshalJournal(t, j)
		j = newJournal(threeStepPlan(), "fp")
		j.Updated = bad
		checkMarshalJournal(t, j)
	}
}

// FuzzMarshalJournal is TestMarshalJournalIsJSONMarshal's random
// journals from the fuzzer's seeds.
func FuzzMarshalJournal(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(35), uint64(1))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkMarshalJournal(t, randomJournal(rand.New(rand.NewPCG(a, b))))
	})
}
