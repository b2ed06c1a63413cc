package diff

// lister adapts one pair of lists (typed or unstructured) to the matching
// algorithm. Implementations are small value types so the generic code is
// instantiated per kind without allocating.
type lister interface {
	lenA() int
	lenB() int
	// keyEq compares the keys of element i of side x with element j of
	// side y (side false = current, true = desired).
	keyEq(x bool, i int, y bool, j int) bool
	// enter pushes the element step for element i of the given side,
	// with its key for the readable path when keyed. It returns false if
	// the element is ignored.
	enter(side bool, i int, keyed bool) bool
	// cmp compares current element i with desired element j (entered).
	cmp(i, j int)
	// same reports, without entering them, that current element i and
	// desired element j are identical, so that comparing them would find
	// no change under any rule (typedSame); false when unsure.
	same(i, j int) bool
	// value returns element i of the given side as JSON data.
	value(side bool, i int) any
	// whole returns the whole list of a side as JSON data.
	whole(side bool) any
}

const (
	sideA = false
	sideB = true
)

// matchList compares two lists. Keyed lists match elements by key; a list
// with repeated keys, or an unkeyed one, is compared by index.
func matchList[L lister](w *walker, l L, keyed, ordered bool) {
	na, nb := l.lenA(), l.lenB()
	if keyed {
		aligned := na == nb
		for i := 0; aligned && i < na; i++ {
			aligned = l.keyEq(sideA, i, sideB, i)
		}
		if aligned {
			for i := 0; i < na && !w.done(); i++ {
				if l.same(i, i) {
					continue
				}
				if l.enter(sideA, i, keyed) {
					l.cmp(i, i)
				}
				w.leave()
			}
			return
		}
		if hasDuplicateKeys(l, sideA, na) || hasDuplicateKeys(l, sideB, nb) {
			keyed = false
		}
	}
	if !keyed {
		n := min(na, nb)
		for i := 0; i < n && !w.done(); i++ {
			if l.same(i, i) {
				continue
			}
			if l.enter(sideA, i, keyed) {
				l.cmp(i, i)
			}
			w.leave()
		}
		for i := n; i < na && !w.done(); i++ {
			if l.enter(sideA, i, keyed) {
				w.emit(OpRemove, l.value(sideA, i), nil)
			}
			w.leave()
		}
		for j := n; j < nb && !w.done(); j++ {
			if l.enter(sideB, j, keyed) {
				w.emit(OpAdd, nil, l.value(sideB, j))
			}
			w.leave()
		}
		return
	}

	var small [4]uint64
	matched := small[:]
	if nb > 256 {
		matched = make([]uint64, (nb+63)/64)
	}
	lastJ, reordered := -1, false
	for i := 0; i < na && !w.done(); i++ {
		j := -1
		for k := 0; k < nb; k++ {
			if matched[k/64]&(1<<(k%64)) == 0 && l.keyEq(sideA, i, sideB, k) {
				j = k
				break
			}
		}
		if j < 0 || !l.same(i, j) {
			if l.enter(sideA, i, keyed) {
				if j < 0 {
					w.emit(OpRemove, l.value(sideA, i), nil)
				} else {
					l.cmp(i, j)
				}
			}
			w.leave()
		}
		if j >= 0 {
			matched[j/64] |= 1 << (j % 64)
			if j < lastJ {
				reordered = true
			}
			lastJ = j
		}
	}
	for j := 0; j < nb && !w.done(); j++ {
		if matched[j/64]&(1<<(j%64)) != 0 {
			continue
		}
		if l.enter(sideB, j, keyed) {
			w.emit(OpAdd, nil, l.value(sideB, j))
		}
		w.leave()
	}
	if reordered && ordered && !w.done() {
		w.emit(OpReplace, l.whole(sideA), l.whole(sideB))
	}
}

func hasDuplicateKeys[L lister](l L, side bool, n int) bool {
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if l.keyEq(side, i, side, j) {
				return true
			}
		}
	}
	return false
}
