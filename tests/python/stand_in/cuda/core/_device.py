"""cuda.core.Device of the stand-in: only .arch, steered by STAND_IN_ARCH."""

STAND_IN_ARCH = "90"


class Device:
    def __init__(self, device_id=None):
        self.device_id = 0 if device_id is None else int(device_id)

    @property
    def arch(self):
        return STAND_IN_ARCH
