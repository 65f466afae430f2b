#!/usr/bin/env bash
# The shared libraries export qkv's public names and nothing else: every
# defined dynamic symbol must demangle to a name in namespace qkv outside its
# detail, kernels and internal namespaces (a function, a class's member, its
# vtable or typeinfo), or be one the linker always defines. Standard-library
# templates instantiated on qkv's public types (std::vector<qkv::Tensor>'s
# members, say) are weak copies that libstdc++'s visible namespace std keeps
# default; they are allowed only as weak symbols. Prints every offender.
#   check_exports.sh LIB.so...
set -euo pipefail
status=0
for lib in "$@"; do
  bad=$(nm -D --defined-only "$lib" | awk '{print $2, $3}' | while read -r type sym; do
    case $sym in _init | _fini | __bss_start | _edata | _end) continue ;; esac
    # What a sanitizer build (the asan preset) adds: ODR indicators and
    # registration flags of instrumented globals.
    case $sym in __odr_asan* | __asan_* | ___asan_* | __ubsan_* | __tsan_*) continue ;; esac
    # Mangled: a name nested in qkv (_ZN3qkv...; _ZNK for const members;
    # _ZTV/_ZTI/_ZTS/_ZTT for vtables, typeinfo and VTTs), with no
    # detail, kernels, internal or anonymous namespace on its path.
    if [[ $sym =~ ^_Z(T[VIST])?N[KVRO]*3qkv && ! $sym =~ (6detail|7kernels|8internal|_GLOBAL__N) ]]; then
      continue
    fi
    # Weak copies of standard-library templates, told by their mangled
    # prefix: std:: (St, or a standard abbreviation Sa Sb Ss Si So Sd) or
    # __gnu_cxx::, nested or not, const or not, their vtables and typeinfo,
    # and the statics local to them (_ZZ) with their guards (_ZGV).
    # (Demangled, a function template's name starts with its return type:
    # "void std::__detail::__to_chars_10_impl<...>", which -O1 builds keep.)
    if [[ $type =~ ^[WVu]$ && $sym =~ ^_Z(T[VIST]|Z|GVZ?)?N?[KVRO]*(S[tabsiod]|9__gnu_cxx) ]]; then
      continue
    fi
    name=$(c++filt -- "$sym")
    echo "  $type $name"
  done)
  if [ -n "$bad" ]; then
    echo "$lib exports names that are not qkv's public API:"
    echo "$bad"
    status=1
  else
    echo "$lib: $(nm -D --defined-only "$lib" | wc -l) exports, all public"
  fi
done
exit $status
