#!/usr/bin/env python
"""Saliency audit of medical images — the same as ``vitroll audit``; see ``--help``.

Example::

    python scripts/medical_audit.py dicoms/ --model vit_small_patch16_224 --checkpoint model.safetensors \
        --class-names classes.txt --window lung \
        --group-by Manufacturer,BodyPartExamined,PatientSex,age-band --out audit/
"""

import sys

from vitroll.cli import main

if __name__ == "__main__":
    sys.exit(main(["audit", *sys.argv[1:]]))
