# Written as manage.py makemigrations writes it: the unique constraint dropped, the foreign key
# pointed at another table (of another key type: Django drops the constraint, changes the
# column and adds the new constraint).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notes', '0002_label'),
    ]

    operations = [
        migrations.AlterField(
            model_name='label',
            name='code',
            field=models.CharField(max_length=20),
        ),
        migrations.AlterField(
            model_name='label',
            name='owner',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, to='notes.note'),
        ),
    ]
