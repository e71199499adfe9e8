"""cupy.cuda.device of the stand-in: Device().compute_capability, steered by STAND_IN_CAPABILITY."""

STAND_IN_CAPABILITY = "90"


class Device:
    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)

    @property
    def compute_capability(self):
        return STAND_IN_CAPABILITY
