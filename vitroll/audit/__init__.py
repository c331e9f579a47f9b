"""Audits of saliency on medical images: where the map's mass lies (body, border, burned-in text, ROI), per
group of scanners and patients, in a PHI-free HTML/CSV/JSON report."""
