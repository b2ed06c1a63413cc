package nodeexec

// writeJournal writes j to the file path as the Runner's default store
// does (encodeJournal, then FileJournalStore's atomic replace), for tests
// that prepare or corrupt a journal file by hand.
func writeJournal(path string, j Journal) error {
	data, err := encodeJournal(j)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data)
}
