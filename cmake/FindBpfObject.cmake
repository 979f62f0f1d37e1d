# bpf_object(NAME SOURCE [DEPENDS headers...])
#   Compiles SOURCE (a .bpf.c) with clang for the BPF target and generates a libbpf
#   skeleton NAME.skel.h with bpftool; defines the INTERFACE target NAME_skel whose
#   include directory holds the skeleton. In the spirit of libbpf-bootstrap's FindBpfObject.
find_program(BPFOBJECT_CLANG_EXE NAMES clang clang-14 REQUIRED)
find_program(BPFOBJECT_BPFTOOL_EXE NAMES bpftool PATHS /usr/sbin /sbin REQUIRED)

# The architecture the BPF programs read registers for: the target's (cross builds too).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64")
  set(BPFOBJECT_ARCH x86)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(BPFOBJECT_ARCH arm64)
else()
  message(FATAL_ERROR "BPF target arch unknown for ${CMAKE_SYSTEM_PROCESSOR}")
endif()

# clang -target bpf does not see the host's multiarch include dirs (asm/types.h);
# ask the host clang for its system include path, as libbpf-bootstrap does.
execute_process(COMMAND ${BPFOBJECT_CLANG_EXE} -v -E - INPUT_FILE /dev/null
                ERROR_VARIABLE _clang_v OUTPUT_QUIET)
string(REGEX MATCH "#include <...> search starts here:\n(.*)\nEnd of search list." _m "${_clang_v}")
string(REPLACE "\n" ";" _dirs "${CMAKE_MATCH_1}")
set(BPFOBJECT_SYS_INCLUDES "")
foreach(d ${_dirs})
  string(STRIP "${d}" d)
  list(APPEND BPFOBJECT_SYS_INCLUDES -idirafter ${d})
endforeach()

# Kernel types come from tracer/bpf/vmlinux_min.h (CO-RE: relocated against the running
# kernel's BTF at load time), so nothing of the build machine's kernel is needed here.
set(BpfObject_FOUND TRUE)

function(bpf_object name source)
  cmake_parse_arguments(ARG "" "" "DEPENDS;INCLUDES" ${ARGN})
  set(out_dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_skel)
  set(obj ${out_dir}/${name}.bpf.o)
  set(skel ${out_dir}/${name}.skel.h)
  set(inc "")
  foreach(i ${ARG_INCLUDES})
    list(APPEND inc -I${i})
  endforeach()
  add_custom_command(OUTPUT ${obj}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
    COMMAND ${BPFOBJECT_CLANG_EXE} -g -O2 -Wall -target bpf -D__TARGET_ARCH_${BPFOBJECT_ARCH}
            ${inc} ${BPFOBJECT_SYS_INCLUDES}
            -c ${CMAKE_CURRENT_SOURCE_DIR}/${source} -o ${obj}
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${source} ${ARG_DEPENDS}
    VERBATIM COMMENT "Compiling BPF object ${name}")
  add_custom_command(OUTPUT ${skel}
    COMMAND ${BPFOBJECT_BPFTOOL_EXE} gen skeleton ${obj} name ${name} > ${skel}
    DEPENDS ${obj} VERBATIM COMMENT "Generating BPF skeleton ${name}.skel.h")
  add_custom_target(${name}_skel_gen DEPENDS ${skel})
  add_library(${name}_skel INTERFACE)
  add_dependencies(${name}_skel ${name}_skel_gen)
  target_include_directories(${name}_skel INTERFACE ${out_dir})
  target_link_libraries(${name}_skel INTERFACE PkgConfig::LIBBPF PkgConfig::LIBELF z)
endfunction()
