/* libbraid.so is built from the braid_internal archive (whole-archive); this translation unit
 * exists because a shared library target needs at least one source of its own. */
