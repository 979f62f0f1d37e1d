# pinned_llama(FLAVOUR) defines the imported target llama_pinned_<FLAVOUR>: headers and
# shared libraries of the pinned llama.cpp as scripts/llama.sh built or unpacked them
# (read from its manifest; no path is decided here).
function(pinned_llama flavour)
  execute_process(COMMAND ${PROFINFER_LLAMA_SCRIPT} manifest ${flavour}
                  OUTPUT_VARIABLE manifest OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "The pinned llama.cpp (${flavour}) is not in the cache: run `make llama` "
                        "(or scripts/llama.sh ensure ${flavour}) first.\n${err}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${manifest})
  file(READ ${manifest} json)
  string(JSON lib_dir GET "${json}" lib_dir)
  string(JSON commit GET "${json}" llama_cpp_commit)
  string(JSON n_inc LENGTH "${json}" include_dirs)
  set(incs "")
  math(EXPR last "${n_inc} - 1")
  foreach(i RANGE ${last})
    string(JSON d GET "${json}" include_dirs ${i})
    list(APPEND incs ${d})
  endforeach()
  set(libs "")
  foreach(key libllama libggml libggml_base)
    string(JSON f GET "${json}" ${key})
    list(APPEND libs ${lib_dir}/${f})
  endforeach()
  add_library(llama_pinned_${flavour} INTERFACE IMPORTED GLOBAL)
  set_target_properties(llama_pinned_${flavour} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${incs}"
    INTERFACE_LINK_LIBRARIES "${libs}"
    INTERFACE_LINK_OPTIONS "-Wl,-rpath,${lib_dir}")
  set(PINNED_LLAMA_${flavour}_INCLUDE_DIRS "${incs}" PARENT_SCOPE)
  set(PINNED_LLAMA_COMMIT "${commit}" PARENT_SCOPE)
  set(PINNED_LLAMA_${flavour}_LIB_DIR "${lib_dir}" PARENT_SCOPE)
endfunction()
