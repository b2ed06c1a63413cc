package capi

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/upgradekit/upgradekit/diff"
	"github.com/upgradekit/upgradekit/nodeexec"
	"github.com/upgradekit/upgradekit/nodeexec/kubeadm"
)

// AnnotationFiles is the Node annotation in which MachineUpdater records
// the digests of the KubeadmConfig files it last wrote on the node and
// verified, one per file (path, mode, owner and content), comma-separated.
// An update whose desired files have other digests, or a node without the
// annotation, gets written by the update's plan the files whose digest the
// annotation does not list, and only those: a file's content travels in
// the upgrader pod only when it changes.
const AnnotationFiles = "upgradekit.io/files"

// desiredFileSet is what a desired KubeadmConfig's files ask of the node:
// the files written in place (inline content), each file's digest, and
// the set's digest (the files' digests, comma-separated; "" when there
// are none, or no KubeadmConfig).
type desiredFileSet struct {
	files   []kubeadm.File
	digests []string // per file
	digest  string
}

// errFileNotInPlace is why a file of a KubeadmConfig is not written in
// place.
var errFileNotInPlace = errors.New("not written in place")

// kubeadmFile converts one KubeadmConfig file, or says why it cannot be
// written in place.
func kubeadmFile(f bootstrapv1.File) (kubeadm.File, error) {
	switch {
	case f.ContentFrom.IsDefined():
		return kubeadm.File{}, fmt.Errorf("%w: its content comes from Secret %s, which the extension does not read (it is not given the management cluster's Secrets)",
			errFileNotInPlace, f.ContentFrom.Secret.Name)
	case f.Append != nil && *f.Append:
		return kubeadm.File{}, fmt.Errorf("%w: append: appending on every update would grow the file", errFileNotInPlace)
	case f.ContentFormat == bootstrapv1.FileContentFormatTemplate:
		return kubeadm.File{}, fmt.Errorf("%w: contentFormat Template is rendered by the bootstrap provider, not here", errFileNotInPlace)
	}
	content, err := decodeFile(f.Encoding, f.Content)
	if err != nil {
		return kubeadm.File{}, fmt.Errorf("%w: %w", errFileNotInPlace, err)
	}
	return kubeadm.File{Path: path.Clean(f.Path), Content: content, Permissions: f.Permissions, Owner: f.Owner}, nil
}

// decodeFile undoes a KubeadmConfig file's encoding, as cloud-init does.
func decodeFile(enc bootstrapv1.Encoding, content string) ([]byte, error) {
	switch enc {
	case "":
		return []byte(content), nil
	case bootstrapv1.Base64:
		return base64.StdEncoding.DecodeString(content)
	case bootstrapv1.Gzip, bootstrapv1.GzipBase64:
		raw := []byte(content)
		if enc == bootstrapv1.GzipBase64 {
			var err error
			if raw, err = base64.StdEncoding.DecodeString(content); err != nil {
				return nil, err
			}
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		// Never more than a plan can carry: a small gzip bomb stops here.
		out, err := io.ReadAll(io.LimitReader(zr, kubeadm.MaxFilesContent+1))
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("encoding %q", enc)
}

// desiredFiles reads the files of a desired KubeadmConfig that are written
// in place; files that are not (FilesCheck declines a change of them),
// among them files kubeadm.ValidateFile refuses (outside the allowed
// directories, a setuid or group-writable mode), are left as the node has
// them.
func desiredFiles(spec *bootstrapv1.KubeadmConfigSpec) desiredFileSet {
	if spec == nil || len(spec.Files) == 0 {
		return desiredFileSet{}
	}
	var out desiredFileSet
	for _, f := range spec.Files {
		kf, err := kubeadmFile(f)
		if err == nil {
			err = kubeadm.ValidateFile("file", kf, nil)
		}
		if err != nil {
			continue
		}
		// Per file what the set digest once was for the whole set: a node
		// annotated by an earlier version with one file keeps it applied.
		sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%x\n", kf.Path, kf.Permissions, kf.Owner, sha256.Sum256(kf.Content)))
		out.files = append(out.files, kf)
		out.digests = append(out.digests, hex.EncodeToString(sum[:])[:16])
	}
	out.digest = strings.Join(out.digests, ",")
	return out
}

// changedSince returns the files whose digest applied (the node's
// AnnotationFiles) does not list: those the node does not have yet.
func (s desiredFileSet) changedSince(applied string) []kubeadm.File {
	have := strings.Split(applied, ",")
	var out []kubeadm.File
	for i, f := range s.files {
		if !slices.Contains(have, s.digests[i]) {
			out = append(out, f)
		}
	}
	return out
}

// withFiles puts the steps that write the files the node does not have
// (applied is its AnnotationFiles) into plan right after its bundle check
// (before anything else changes: a file may be what a restarted kubelet
// reads), with their backups under the plan's own backup directory. Files
// the node has are left out: their content never travels in the upgrader
// pod again. With none left, plan is returned as it is.
func withFiles(plan nodeexec.Plan, files desiredFileSet, applied string) (nodeexec.Plan, error) {
	changed := files.changedSince(applied)
	if len(changed) == 0 {
		return plan, nil
	}
	fp, err := kubeadm.NewFilesPlan(kubeadm.FilesConfig{PlanName: plan.Name, Node: plan.Node, Files: changed,
		BackupDir: path.Join(kubeadm.DefaultBackupRoot, plan.Name, "files")})
	if err != nil {
		return nodeexec.Plan{}, err
	}
	at := 0
	if len(plan.Steps) > 0 && plan.Steps[0].Name == kubeadm.StepBundle {
		at = 1
	}
	plan.Steps = slices.Concat(plan.Steps[:at:at], fp.Steps, plan.Steps[at:])
	if err := plan.Validate(); err != nil {
		return nodeexec.Plan{}, err
	}
	return plan, nil
}

// FilesCheck declines an in-place update that changes a KubeadmConfig file
// MachineUpdater cannot write: content from a Secret, append, a template,
// an undecodable encoding, a path it does not write (outside
// kubeadm.DefaultFilesAllowedDirs, or kubeadm's certificates and
// kubeconfigs, the static pod manifests, its own state), a setuid, setgid,
// sticky or group- or world-writable mode, or more content than an
// upgrader pod carries. Such a file is only
// written by the bootstrap provider at boot, so the machine is replaced.
// Unchanged files are left alone, whatever they are. The Extension always
// runs it.
func FilesCheck() Check {
	return CheckFunc(func(_ context.Context, r CheckRequest) error {
		des, ok := r.Desired.Bootstrap.(runtime.RawExtension)
		if !ok {
			return nil
		}
		desSpec, err := desiredSpec(des, r.Templates)
		if err != nil || desSpec == nil {
			return nil // not a KubeadmConfig this updater applies
		}
		var curFiles []bootstrapv1.File
		if cur, ok := r.Current.Bootstrap.(runtime.RawExtension); ok {
			if curSpec, err := desiredSpec(cur, r.Templates); err == nil && curSpec != nil {
				curFiles = curSpec.Files
			}
		}
		changed := slices.ContainsFunc(r.Decision.InPlace.Changes, func(c diff.Change) bool {
			return c.Category == diff.CategoryFiles
		})
		if !changed {
			return nil
		}
		var written []kubeadm.File
		for i, f := range desSpec.Files {
			if slices.ContainsFunc(curFiles, func(c bootstrapv1.File) bool { return equalFiles(c, f) }) {
				continue // as the node has it
			}
			field := fmt.Sprintf("bootstrap.spec.files[%d]", i)
			kf, err := kubeadmFile(f)
			if err == nil {
				err = kubeadm.ValidateFile(field, kf, nil)
			}
			if err != nil {
				return fmt.Errorf("%w: %s (%s) cannot be written in place: %w", ErrInfeasible, field, f.Path, err)
			}
			written = append(written, kf)
		}
		if len(written) > 0 {
			if _, err := kubeadm.NewFilesPlan(kubeadm.FilesConfig{Node: "check", Files: desiredFiles(desSpec).files}); err != nil {
				return fmt.Errorf("%w: bootstrap.spec.files cannot be written in place: %w", ErrInfeasible, err)
			}
		}
		return nil
	})
}

// equalFiles compares two KubeadmConfig files field by field.
func equalFiles(a, b bootstrapv1.File) bool {
	return a.Path == b.Path && a.Owner == b.Owner && a.Permissions == b.Permissions && a.Encoding == b.Encoding &&
		a.Content == b.Content && a.ContentFrom == b.ContentFrom && a.ContentFormat == b.ContentFormat &&
		(a.Append == nil) == (b.Append == nil) && (a.Append == nil || *a.Append == *b.Append)
}
