"""`import kiln.torch.auto` routes torch.cuda._compile_kernel through kiln: kiln.torch.enable() as one import
line. Raises kiln.Error (and changes nothing) for a torch other than 2.11.x."""

from . import enable

enable()
