// A header in the stand-in torch's include folder (torch passes its include folders to NVRTC).
#pragma once
