# The Diagnose tab's ES modules; a package only so the wheel carries them.
