# Sourced by scripts/clean-install.sh and scripts/unit-py313.sh: find_python WANT prints an interpreter's path.
#   WANT: a path; pythonX.Y or X.Y: the pythonX.Y on PATH (what a pyenv shim runs, if it is X.Y), else
#   pyenv's build (`pyenv root`, else ~/.pyenv: versions/X.Y*/bin/pythonX.Y, newest patch first).
# Returns 1 (printing nothing) when there is none.
find_python() {
  local w=$1 version root candidate
  if [[ $w == */* ]]; then [ -x "$w" ] && { echo "$w"; return 0; }; return 1; fi
  version=${w#python}
  [[ $version =~ ^3\.[0-9]+$ ]] || { command -v "$w" 2>/dev/null && return 0; return 1; }
  # on PATH (a pyenv shim resolves to the interpreter it runs), if it is that version
  if candidate=$("python$version" -c 'import sys; print(sys.executable)' 2>/dev/null) \
    && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$version" ]; then
    echo "$candidate"
    return 0
  fi
  # else pyenv's builds, newest patch release first
  root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for candidate in $(ls -d "$root"/versions/"$version"*/bin/python"$version" 2>/dev/null | sort -V -r); do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}
