"""`<!-- repository -->`: the list of the repository's files, each linked to its copy in the site,
with a link to all of them as one .zip; after the build, those copies and the .zip."""
import re
import stat
import subprocess
import zipfile

from .markers import block_marker

REPOSITORY = block_marker("repository")
ARCHIVE = "ddp-tutorial.zip"  # written next to the site's index.html


def repository_files(root):
    """The repository's files, as git tracks them (every file when git is not there)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
        names = [n for n in out.stdout.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "site", "runs", "logs", "data", ".cache", "__pycache__"}
        names = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*"))
                 if (p.is_file() or p.is_symlink()) and not skip & set(p.relative_to(root).parts)]
    return sorted(n for n in names if (root / n).exists() or (root / n).is_symlink())


FILES = "files"  # the site's copy of every tracked file (on_post_build), one link each


def repository_page(root):
    """Every file, linked to its copy in the site, under one heading per top-level folder (what the
    folder holds, from README.md's table); subfolders are nested lists."""
    # raw HTML links: the files are copied after the build, MkDocs cannot check Markdown links to them
    about = dict(re.findall(r"^\| `([\w.-]+)/` \| (.+?) \|$", (root / "README.md").read_text(), re.M))
    rows = [f'Everything below in one file: <a href="../{ARCHIVE}" download>{ARCHIVE}</a>. '
            "Or open one file from the lists: each name links to that file.", ""]
    groups = {}
    for name in repository_files(root):
        groups.setdefault(name.split("/")[0] if "/" in name else "", []).append(name)
    for top in sorted(groups, key=lambda t: (t != "", t.lower())):
        rows += ["", f"### `{top}/`" if top else "### Top level", ""]
        if top in about:
            rows += [about[top][0].upper() + about[top][1:] + ".", ""]
        shown = set()
        for name in groups[top]:
            parts = name.split("/")
            for depth in range(1, len(parts) - 1):  # a subfolder: a list item of its own
                sub = "/".join(parts[:depth + 1]) + "/"
                if sub not in shown:
                    shown.add(sub)
                    rows.append("    " * (depth - 1) + f"- **{sub}**")
            indent = "    " * max(0, len(parts) - 2)
            if (root / name).is_symlink():
                rows.append(f"{indent}- `{name}` (a symbolic link to {(root / name).readlink()})")
            else:
                rows.append(f'{indent}- <a href="../{FILES}/{name}">`{name}`</a>')  # (`: __init__.py is no bold init)
    return "\n".join(rows)


def copy_files(root, site_dir):
    """Each tracked file as site/files/<path>, so that a reader can fetch one (Repository page)."""
    for name in repository_files(root):
        if not (root / name).is_symlink():
            target = site_dir / FILES / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((root / name).read_bytes())


def write_archive(root, site_dir):
    """The whole repository as one .zip in the site (the Repository page links to it)."""
    with zipfile.ZipFile(site_dir / ARCHIVE, "w", zipfile.ZIP_DEFLATED) as z:
        for name in repository_files(root):
            path = root / name
            info = zipfile.ZipInfo(f"ddp-tutorial/{name}", date_time=(2020, 1, 1, 0, 0, 0))
            if path.is_symlink():  # docs/notebooks -> ../notebooks, restored by unzip
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                z.writestr(info, str(path.readlink()))
            else:
                info.external_attr = (stat.S_IFREG | (0o755 if path.stat().st_mode & 0o111 else 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, path.read_bytes())
