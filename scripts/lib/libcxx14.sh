# libcxx14_root DIR: Debian 12's libc++ 14 (headers and libraries) unpacked under DIR/root, once,
# and its root printed. libc++-14-dev and libc++-16-dev cannot be installed together (each owns
# /usr/lib/llvm-N/... and conflicts with the other's libc++1 and libc++abi1), so the libcxx stage
# of scripts/test.sh installs libc++ 16 and unpacks 14 beside it with apt-get download and
# dpkg-deb -x: clang++-14 -nostdinc++ -isystem ROOT/usr/lib/llvm-14/include/c++/v1, linked with
# -L and -rpath ROOT/usr/lib/llvm-14/lib. Sourced, not run.
libcxx14_root() {
  local dir=$1 p
  if [ ! -f "$dir/root/usr/lib/llvm-14/include/c++/v1/vector" ] ||
     [ ! -e "$dir/root/usr/lib/llvm-14/lib/libunwind.so" ]; then
    rm -rf "$dir" && mkdir -p "$dir/debs" || return 1
    (cd "$dir/debs" && apt-get download -qq libc++-14-dev libc++1-14 libc++abi-14-dev libc++abi1-14 \
       libunwind-14 libunwind-14-dev >/dev/null 2>&1) ||
      { echo "apt-get download of libc++ 14 failed" >&2; return 1; }
    for p in "$dir"/debs/*.deb; do dpkg-deb -x "$p" "$dir/root" || return 1; done
  fi
  echo "$dir/root"
}
