"""cuda.core.utils of the stand-in: only the program-cache names kiln.cuda_core touches (cuda.core 1.2's
ProgramCacheResource and make_program_cache_key, shaped as cuda.core documents them). Not cuda.core's
code: a minimal stand-in, with no cache of its own (FileStreamProgramCache, InMemoryProgramCache are not
here)."""

from cuda.core.utils._program_cache import ProgramCacheResource, make_program_cache_key

__all__ = ["ProgramCacheResource", "make_program_cache_key"]
