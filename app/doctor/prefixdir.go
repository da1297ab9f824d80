package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/app/models"
)

// prefixDirCheck checks the prefix cache's disk tier (--prefix-cache-dir) as serve would meet it: a backend
// that writes its states, and a directory it can write to (or create). It makes nothing: an existing
// directory is probed with a temporary file, removed at once; a missing one needs a parent directory.
func prefixDirCheck(cfg app.Config) (Check, bool) {
	dir := cfg.PrefixCacheDir
	if dir == "" {
		return Check{}, false
	}
	c := Check{Name: "prefix cache"}
	if b, err := models.ChooseBackend(cfg.ModelConfig()); err == nil && b.Backend == models.BackendMLX {
		c.Status, c.Detail = Fail, "the mlx backend cannot write its prefix states to disk (--prefix-cache-dir "+dir+")"
		c.Fix = "drop --prefix-cache-dir, or serve with --backend cpu"
		return c, true
	}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(filepath.Clean(dir))
		if ps, perr := os.Stat(parent); perr != nil || !ps.IsDir() {
			c.Status, c.Detail = Fail, fmt.Sprintf("%s does not exist, nor does its parent %s", dir, parent)
			c.Fix = "create the directory, or point --prefix-cache-dir at one higgsd may create"
			return c, true
		}
		c.Status, c.Detail = OK, fmt.Sprintf("%s will be created; disk budget %s", dir, human(cfg.PrefixCacheDiskBytes))
		return c, true
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, err.Error(), "make --prefix-cache-dir readable by this user"
		return c, true
	case !st.IsDir():
		c.Status, c.Detail, c.Fix = Fail, dir+" is not a directory", "point --prefix-cache-dir at a directory"
		return c, true
	}
	f, err := os.CreateTemp(dir, ".doctor-probe-*")
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("cannot write in %s: %v", dir, err), "make --prefix-cache-dir writable by this user"
		return c, true
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	var held int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && filepath.Ext(e.Name()) == ".hpc" {
			held += info.Size()
		}
	}
	c.Status, c.Detail = OK, fmt.Sprintf("%s is writable; it holds %s of records (every model's); disk budget %s per model",
		dir, human(held), human(cfg.PrefixCacheDiskBytes))
	return c, true
}
